import Foundation
import Synchronization
internal import CSignetSystem
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore

/// The commands an install runs around its swap (FORMAT.md §2 "Hooks"): each is an
/// argument vector, run without a shell (a shell only where the command names one), with a
/// clean environment (a fixed `PATH`, `LANG=C.UTF-8` and the `SIGNET_*` variables), standard
/// input from `/dev/null`, and its standard output and error captured (the last 64 KiB) into
/// the install's report.
public struct InstallHooks: Sendable {
    /// Run once the new release is staged and verified, just before the swap: exit
    /// 0 installs it; exit 75 (EX_TEMPFAIL, "not now") keeps what was staged for the next run
    /// (`.installDeferred`); anything else refuses the release for this run
    /// (`.preInstallRefused`). It runs in a clean environment like the others, with
    /// `SIGNET_EVENT=pre-install`, and may take `preInstallTimeout` seconds.
    public var preInstall: [String]? = nil
    public var preInstallTimeout: Double = 300
    /// Run after every successful swap (and again after a health check's rollback, with
    /// `SIGNET_EVENT=rollback`): restart the application, reload a service. Its failure is
    /// reported, and changes nothing.
    public var postInstall: [String]? = nil
    /// Run after the post-install command: a non-zero exit, a signal or `healthTimeout` makes
    /// the install swap the previous release back, record this one as bad and fail with
    /// `health-check-failed`.
    public var healthCheck: [String]? = nil
    /// Seconds the health check may take (it and its children are then killed).
    public var healthTimeout: Double = 60

    public init() {}

    /// Splits a command line into words as a shell would split it, without a shell: blanks
    /// separate words, single quotes keep everything, double quotes keep blanks, a backslash
    /// escapes the next character. Nothing is expanded. Nil for an empty command or an
    /// unterminated quote.
    public static func words(_ line: String) -> [String]? {
        var words: [String] = [], current = "", inWord = false
        var quote: Character? = nil, escaped = false
        for character in line {
            if escaped { current.append(character); escaped = false; inWord = true; continue }
            if let open = quote {
                if character == open { quote = nil } else if character == "\\" && open == "\"" { escaped = true } else { current.append(character) }
                continue
            }
            switch character {
            case " ", "\t", "\n":
                if inWord { words.append(current); current = ""; inWord = false }
            case "'", "\"": quote = character; inWord = true
            case "\\": escaped = true
            default: current.append(character); inWord = true
            }
        }
        guard quote == nil, !escaped else { return nil }
        if inWord { words.append(current) }
        return words.isEmpty ? nil : words
    }
}

/// What one hook did.
public struct HookResult: Sendable, Equatable {
    /// "pre-install", "post-install" or "health-check".
    public let hook: String
    public let command: [String]
    /// Its exit status; nil when a signal ended it, it timed out or it could not be started.
    public let exitStatus: Int32?
    /// It ran past its timeout and was killed.
    public let timedOut: Bool
    /// Its standard output and error, interleaved (the last 64 KiB).
    public let output: String
    /// Why it could not be started, if it could not.
    public let failure: String?

    /// Exit 0.
    public var succeeded: Bool { exitStatus == 0 && !timedOut }

    /// "exit 3", "timed out after 5 s", "killed by signal 9", "could not be started: …".
    public var outcome: String {
        if let failure { return "could not be started: \(failure)" }
        if timedOut { return "timed out" }
        if let exitStatus { return "exit \(exitStatus)" }
        return "ended by a signal"
    }
}

/// Runs one hook.
package enum HookRunner {
    static let path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    static let outputLimit = 64 * 1024

    /// The process group of the hook running now (its pid), for an interruption to end.
    private static let running = Mutex<pid_t?>(nil)
    /// Set once an interruption ended (or forbade) hooks: nothing after a hook is recorded.
    private static let stopped = Mutex(false)
    static var isStopped: Bool { stopped.withLock { $0 } }

    /// Ends the running hook's process group (SIGTERM, then SIGKILL after at most a second):
    /// for a signal-handling thread about to exit the process, so that no hook (or what it
    /// started) outlives an interrupted Signet. The release stays `unchecked` in its record.
    package static func endRunning() {
        stopped.withLock { $0 = true }
        guard let group = running.withLock({ $0 }) else { return }
        kill(-group, SIGTERM)
        for _ in 0..<20 {
            usleep(50_000)
            if kill(-group, 0) != 0 { return }
            var status: Int32 = 0
            if waitpid(group, &status, WNOHANG) == group, kill(-group, 0) != 0 { return }
        }
        kill(-group, SIGKILL)
        // Reaped here, not left a zombie for whatever adopts it once Signet exits (a container's
        // first process may never reap): a zombie still answers kill(-group, 0).
        for _ in 0..<20 {
            var status: Int32 = 0
            if waitpid(group, &status, WNOHANG) == group || kill(-group, 0) != 0 { return }
            usleep(50_000)
        }
    }

    /// Runs `command` with `environment` (added to the clean one), waiting at most `timeout`
    /// seconds (nil: no limit) before killing its process group.
    ///
    /// `started` is told the hook's pid (its process group) once it runs, for the release
    /// record (a next run ends a group a killed Signet left behind).
    static func run(
        _ hook: String, _ command: [String], environment: [String: String], timeout: Double?,
        started: ((pid_t) -> Void)? = nil
    ) -> HookResult {
        func failed(_ why: String) -> HookResult {
            HookResult(hook: hook, command: command, exitStatus: nil, timedOut: false, output: "", failure: why)
        }
        guard !isStopped else { return failed("interrupted") }
        guard let program = resolve(command[0]) else {
            return failed("'\(command[0])' is not an executable file (commands run without a shell; a name without a slash is looked up in \(path))")
        }
        var pipeFDs: [Int32] = [0, 0]
        guard pipe(&pipeFDs) == 0 else { return failed(String(cString: strerror(errno))) }
        for fd in pipeFDs { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let reading = OwnedDescriptor(adopting: pipeFDs[0])
        // The write end: the child's copy (dup2 clears its close-on-exec) stays; ours closes
        // once the child is started, so that the pipe ends when the hook and its children do.
        let writing = OwnedDescriptor(adopting: pipeFDs[1])
        let env = ["PATH=\(path)", "LANG=C.UTF-8"] + environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0
        var go: [Int32] = [-1, -1]
        // The spawn and its record are one step for `endRunning`, under the lock it reads: it
        // finds either no hook (and has set `stopped` first, so none starts after) or this one.
        // Spawned and recorded apart, a SIGTERM between the two left the hook running after
        // Signet exited (seen in CI under load).
        let spawned: Int32 = running.withLock { current in
            guard !isStopped else { return ECANCELED }
            // Its own process group (a timeout kills it and its children), default signals,
            // descriptors 0, 1 and 2 only (FORMAT §2: whatever else is open in this process, a
            // library's socket pair without close-on-exec or DIR's lock, never reaches a hook or
            // a daemon it leaves running), and killed with Signet (PR_SET_PDEATHSIG).
            let result = withCStrings(command) { argv in
                withCStrings(env) { envp in signet_spawn_hook(program, argv, envp, writing.descriptor.rawValue, &pid, &go) }
            }
            if result == 0 { current = pid }
            return result
        }
        try? writing.close()
        if spawned == ECANCELED { return failed("interrupted") }
        guard spawned == 0 else { return failed(String(cString: strerror(spawned))) }
        defer { running.withLock { $0 = nil } }
        // Recorded (the release record names it) before it may run: a Signet killed in between
        // leaves no hook it did not record.
        started?(pid)
        let ran = signet_spawn_hook_go(pid, go)
        guard ran == 0 else { return failed(HookRunner.isStopped ? "interrupted" : String(cString: strerror(ran))) }
        let deadline = timeout.map { DispatchTime.now().uptimeNanoseconds + UInt64(max(0, $0) * 1e9) }
        var output: [UInt8] = []
        var timedOut = false
        var status: Int32 = 0
        var reaped = false
        var buffer = [UInt8](repeating: 0, count: 16384)
        func drain(wait: Int32) -> Bool {
            var poller = pollfd(fd: reading.descriptor.rawValue, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, wait) > 0 else { return false }
            let count = read(reading.descriptor.rawValue, &buffer, buffer.count)
            guard count > 0 else { return false }
            output.append(contentsOf: buffer[0..<count])
            if output.count > 2 * outputLimit { output.removeFirst(output.count - outputLimit) }
            return true
        }
        // Until the hook itself ends (a daemon it started may keep the pipe open) or its time
        // is up; then what is left in the pipe.
        while !reaped {
            if let deadline, DispatchTime.now().uptimeNanoseconds >= deadline {
                timedOut = true
                kill(-pid, SIGKILL)
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                reaped = true
                break
            }
            _ = drain(wait: 50)
            if waitpid(pid, &status, WNOHANG) == pid { reaped = true }
        }
        while drain(wait: 0) {}
        if output.count > outputLimit { output.removeFirst(output.count - outputLimit) }
        let exited = status & 0x7f == 0
        return HookResult(
            hook: hook, command: command, exitStatus: exited && !timedOut ? (status >> 8) & 0xff : nil, timedOut: timedOut,
            output: String(decoding: output, as: UTF8.self), failure: nil)
    }

    /// `name` itself when it has a slash, else the first executable `name` on the clean PATH.
    private static func resolve(_ name: String) -> String? {
        if name.contains("/") { return access(name, X_OK) == 0 ? name : nil }
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            var info = stat()
            if stat(candidate, &info) == 0, info.st_mode & S_IFMT == S_IFREG, access(candidate, X_OK) == 0 { return candidate }
        }
        return nil
    }

    private static func withCStrings<R>(_ strings: [String], _ body: ([UnsafeMutablePointer<CChar>?]) -> R) -> R {
        var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
        pointers.append(nil)
        defer { pointers.forEach { free($0) } }
        return body(pointers)
    }
}
