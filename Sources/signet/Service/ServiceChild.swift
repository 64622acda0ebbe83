import Foundation
import Signet
import Synchronization
internal import CSignetSystem
#if canImport(Glibc)
import Glibc
#endif

/// One command `signet serve` runs for a client: this same signet binary with the method's
/// arguments and `--json`, so that what the service does is exactly what the command does.
/// Its `--json` document is read from standard output, its events (descriptor 3, for
/// `--events-fd 3`) are handed on line by line as they come, and the end of its standard
/// error is kept for the service's log.
final class ServiceChild: Sendable {
    /// What the command left when it ended.
    struct Outcome {
        /// Its `--json` document (a result, or `{"error": …}`), nil if it printed none.
        let document: [String: Any]?
        /// Its exit status, or nil when a signal ended it.
        let exitStatus: Int32?
        /// The signal that ended it.
        let signal: Int32?
        /// The end of what it wrote on standard error.
        let standardError: String
    }

    /// The most of standard output and of one event line read (a document is a few KiB).
    static let largestDocument = 16 << 20
    /// The end of standard error kept.
    static let keptStandardError = 64 << 10

    let pid: pid_t
    private let output: SharedDescriptor
    private let errors: SharedDescriptor
    private let events: SharedDescriptor

    /// The binary the service runs: its own.
    static let executable: String = {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        return n > 0 ? String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
    }()

    /// What the service's own environment gives the command: all but systemd's socket
    /// activation and notification variables, which are the service's alone.
    static let environment: [String] = {
        let serviceOnly: Set<String> = ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC"]
        return ProcessInfo.processInfo.environment.filter { !serviceOnly.contains($0.key) }.map { "\($0.key)=\($0.value)" }.sorted()
    }()

    /// Starts `signet ARGUMENTS`.
    init(arguments: [String]) throws {
        // Three pipes: standard output, standard error, events. The service keeps the read
        // ends; the write ends close here once the command has its copies.
        var ends: [Int32] = []
        for _ in 0..<3 {
            var pair: [Int32] = [0, 0]
            guard signet_pipe_cloexec(&pair) == 0 else {
                let failure = errno
                for end in ends { close(end) }
                throw SignetError.posix(failure, "cannot make a pipe for the service's command", path: Self.executable, call: "pipe2")
            }
            ends += pair
        }
        output = SharedDescriptor(OwnedDescriptor(adopting: ends[0]))
        errors = SharedDescriptor(OwnedDescriptor(adopting: ends[2]))
        events = SharedDescriptor(OwnedDescriptor(adopting: ends[4]))
        defer { for end in [ends[1], ends[3], ends[5]] { close(end) } }
        let argv = [Self.executable] + arguments
        var child: pid_t = 0
        let failure = withCStrings(argv) { argv in
            withCStrings(Self.environment) { envp in signet_spawn_service(Self.executable, argv, envp, ends[1], ends[3], ends[5], &child) }
        }
        guard failure == 0 else { throw SignetError.posix(failure, "cannot start \(Self.executable)", path: Self.executable, call: "posix_spawn") }
        pid = child
    }

    /// Asks the command to stop (SIGTERM): it removes what it staged and ends as the signal
    /// would end it, its destination as it was.
    func terminate() { kill(pid, SIGTERM) }

    /// Reads until the command ends, handing each event (a line with an `event` key) to
    /// `onEvent` as it arrives, and returns what it left.
    func wait(onEvent: ([String: Any]) -> Void) -> Outcome {
        var stdout: [UInt8] = [], stderr: [UInt8] = [], line: [UInt8] = []
        var open: [Int32] = [output.descriptor.rawValue, errors.descriptor.rawValue, events.descriptor.rawValue]
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while !open.isEmpty {
            var polled = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&polled, nfds_t(polled.count), -1)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            for entry in polled where entry.revents != 0 {
                let n = chunk.withUnsafeMutableBytes { read(entry.fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else {
                    open.removeAll { $0 == entry.fd }
                    continue
                }
                let bytes = chunk[..<n]
                switch entry.fd {
                case output.descriptor.rawValue:
                    if stdout.count + n <= Self.largestDocument { stdout.append(contentsOf: bytes) }
                case errors.descriptor.rawValue:
                    stderr.append(contentsOf: bytes)
                    if stderr.count > Self.keptStandardError { stderr.removeFirst(stderr.count - Self.keptStandardError) }
                default:
                    for byte in bytes {
                        if byte == 0x0a {
                            if let object = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any], object["event"] != nil { onEvent(object) }
                            line.removeAll(keepingCapacity: true)
                        } else if line.count < Self.largestDocument {
                            line.append(byte)
                        }
                    }
                }
            }
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let exited = status & 0x7f == 0
        let document = try? JSONSerialization.jsonObject(with: Data(stdout)) as? [String: Any]
        return Outcome(
            document: document ?? nil, exitStatus: exited ? (status >> 8) & 0xff : nil, signal: exited ? nil : status & 0x7f,
            standardError: String(decoding: stderr, as: UTF8.self))
    }
}

/// `body` with `strings` as a NULL-terminated array of C strings.
private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { for pointer in pointers { free(pointer) } }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}
