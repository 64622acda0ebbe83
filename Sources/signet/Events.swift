import ArgumentParser
import Dispatch
import Foundation
import Signet
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// `--events-fd N` and `--events FILE`: what a command does, as JSON lines for an agent or a UI
/// (FORMAT.md §4, "Events"; docs/schema/events.schema.json).
struct EventOptions: ParsableArguments {
    @Option(
        name: .customLong("events-fd"),
        help: ArgumentHelp(
            "Write events as JSON lines to this open descriptor (3 or more): each step, progress at least every second or 1%, warnings, and last the --json result.",
            valueName: "n"))
    var fd: Int32?

    @Option(name: .customLong("events"), help: ArgumentHelp("Write the same events to this new file (replaced if it exists).", valueName: "file"))
    var file: String?

    func validate() throws {
        if fd != nil && file != nil { throw ValidationError("give either --events-fd or --events, not both") }
        if let fd {
            guard fd >= 3 else { throw ValidationError("--events-fd takes a descriptor of 3 or more (0, 1 and 2 are stdin, stdout and stderr), not \(fd)") }
            guard fcntl(fd, F_GETFL) != -1 else { throw ValidationError("--events-fd \(fd) is not an open descriptor of this process") }
        }
    }

    /// Starts the stream these options ask for (nothing when neither was given).
    func start() throws {
        // A reader that goes away costs the events, never the command.
        if fd != nil || file != nil { signal(SIGPIPE, SIG_IGN) }
        if let fd {
            Events.start(Events(fd: fd, owned: false))
        } else if let file {
            let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw SignetError.posix(errno, "cannot open the events file", path: file, call: "open") }
            Events.start(Events(fd: fd, owned: true))
        }
    }
}

/// One command's event stream: JSON lines written whole (one `write` each, so a reader on a
/// pipe never sees half a line), from any thread.
final class Events: Sendable {
    private struct State {
        var phase = "start"
        var lastTime: UInt64 = 0
        var lastFraction: Double = -1
        var start: UInt64 = DispatchTime.now().uptimeNanoseconds
    }

    private let fd: Int32
    private let owned: Bool
    private let state = Mutex(State())
    private static let shared = Mutex<Events?>(nil)

    init(fd: Int32, owned: Bool) {
        self.fd = fd
        self.owned = owned
    }

    deinit { if owned { close(fd) } }

    /// The stream of this command, once started.
    static var current: Events? { shared.withLock { $0 } }

    static func start(_ events: Events) { shared.withLock { $0 = events } }

    /// A handler for the library's steps.
    static var phaseHandler: PhaseHandler? {
        guard let events = current else { return nil }
        return { events.phase($0) }
    }

    func phase(_ phase: WorkPhase) { self.phase(phase.rawValue) }

    /// A step by name: the library's (``WorkPhase``), or the command's own (`pack`, `reverify`).
    func phase(_ name: String) {
        let now = Self.now
        state.withLock {
            $0.phase = name
            $0.lastFraction = -1
            $0.lastTime = 0
            $0.start = DispatchTime.now().uptimeNanoseconds
        }
        write(["event": "phase", "phase": name, "time": now])
    }

    /// Progress of the step under way: written when a second has passed or 1% more is done
    /// since the last, when it finishes, and at most ten times a second.
    func progress(bytesDone: UInt64, bytesTotal: UInt64?, filesDone: Int? = nil, filesTotal: Int? = nil, finished: Bool = false) {
        let line: [String: Any]? = state.withLock { state in
            let now = DispatchTime.now().uptimeNanoseconds
            let fraction = bytesTotal.map { $0 > 0 ? Double(bytesDone) / Double($0) : 1 } ?? -1
            let due = finished || now &- state.lastTime >= 1_000_000_000 || (fraction >= 0 && fraction - state.lastFraction >= 0.01)
            guard due, finished || now &- state.lastTime >= 100_000_000 else { return nil }
            state.lastTime = now
            state.lastFraction = fraction
            let seconds = Double(now &- state.start) / 1e9
            return [
                "event": "progress", "phase": state.phase, "bytes_done": bytesDone, "bytes_total": bytesTotal.map { $0 as Any } ?? NSNull(),
                "files_done": filesDone.map { $0 as Any } ?? NSNull(), "files_total": filesTotal.map { $0 as Any } ?? NSNull(),
                "rate": seconds > 0.05 ? Double(bytesDone) / seconds as Any : NSNull(), "time": Self.now
            ]
        }
        if let line { write(line) }
    }

    /// The release the command installs, once chosen (`update`): its name, version, sequence
    /// and the SHA-256 of its signed manifest.
    func release(_ release: TUFPackageTarget) {
        write([
            "event": "release", "name": release.name, "version": release.version, "sequence": release.sequence, "manifest_sha256": release.manifestSHA256,
            "time": Self.now
        ])
    }

    func warning(_ message: String) {
        write(["event": "warning", "message": message, "time": Self.now])
    }

    /// The command's `--json` document, compact, as the last line.
    func result(_ document: Data) {
        var line = document
        line.append(0x0a)
        put(line)
    }

    private func write(_ object: [String: Any]) {
        guard var data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else { return }
        data.append(0x0a)
        put(data)
    }

    private func put(_ data: Data) {
        data.withUnsafeBytes { bytes in
            var done = 0
            while done < bytes.count {
                let n = Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done)
                if n < 0 && errno == EINTR { continue }
                // A reader that went away costs the events, never the install.
                guard n > 0 else { return }
                done += n
            }
        }
    }

    private static var now: String { Timestamp.now.rfc3339 }
}
