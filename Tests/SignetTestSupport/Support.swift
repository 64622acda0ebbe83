import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What a finished child process left behind.
public struct ProcessResult: Sendable {
    public let status: Int32
    public let stdout: Data
    public let stderr: String
    public var stdoutText: String { String(decoding: stdout, as: UTF8.self) }

    /// Parses stdout as a JSON object.
    public func json() throws -> [String: Any] {
        guard let object = try JSONSerialization.jsonObject(with: stdout) as? [String: Any] else {
            throw SupportError("stdout is not a JSON object: \(stdoutText)")
        }
        return object
    }
}

public struct SupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Runs a program to completion. stdin is /dev/null unless `input` is given, so nothing can
/// prompt; `environment` entries are added to (or, with nil values, removed from) this process's.
/// A program still running after `timeout` seconds is killed with every process it started (it
/// runs in its own process group), and the call throws: a hang is a test failure, never a stuck
/// CI run.
///
/// Started with posix_spawn, not Foundation's `Process`: Process.run (Swift 6.3.1) finds the
/// highest open descriptor by copying each /proc/self/fd entry as a fixed 256-byte block, which
/// reads past glibc's dirent buffer and crashes the test process when that buffer ends at an
/// unmapped page (it did, once, in a full run; .ci/asan-suppressions.txt has the ASan view).
@discardableResult
public func run(
    _ executable: String, _ arguments: [String], input: Data? = nil,
    environment: [String: String?] = [:], directory: String? = nil,
    timeout: Double = 300
) throws -> ProcessResult {
    let path = executable.hasPrefix("/") ? executable : try which(executable)
    var env = ProcessInfo.processInfo.environment
    for (key, value) in environment { env[key] = value }

    func makePipe() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        // Atomically close-on-exec: a test spawning at the same moment must not inherit it
        // (its copy of the write end would keep this pipe from ever ending).
        guard makePipe2(&fds, O_CLOEXEC) == 0 else { throw SupportError("pipe2 failed: errno \(errno)") }
        return (fds[0], fds[1])
    }
    let out = try makePipe(), err = try makePipe()
    let stdinPipe = try input.map { _ in try makePipe() }

    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    if let stdinPipe {
        posix_spawn_file_actions_adddup2(&actions, stdinPipe.read, 0)
    } else {
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    }
    posix_spawn_file_actions_adddup2(&actions, out.write, 1)
    posix_spawn_file_actions_adddup2(&actions, err.write, 2)
    if let directory { _ = spawnAddChdir(&actions, directory) }
    var attributes = posix_spawnattr_t()
    startsAsFromAShell(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    // Its own process group, so the watchdog kills what it started too: a wrapper (faketime,
    // strace, setpriv) killed alone leaves its child holding the pipes, and the read below
    // would wait for it forever.
    posix_spawnattr_setpgroup(&attributes, 0)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))

    let argv = ([path] + arguments).map { strdup($0) } + [nil]
    let envp = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
        for pointer in argv { free(pointer) }
        for pointer in envp { free(pointer) }
    }
    var pid: pid_t = 0
    let spawned = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
    close(out.write)
    close(err.write)
    if let stdinPipe { close(stdinPipe.read) }
    guard spawned == 0 else {
        close(out.read)
        close(err.read)
        if let stdinPipe { close(stdinPipe.write) }
        throw SupportError("cannot start \(path): errno \(spawned)")
    }
    let child = pid
    let watchdog = DispatchWorkItem { kill(-child, SIGKILL) }
    DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: watchdog)
    if let input, let stdinPipe {
        // Written from another thread, so that a child that writes before it reads cannot block us.
        let writer = stdinPipe.write
        DispatchQueue.global().async {
            input.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let done = write(writer, bytes.baseAddress! + offset, bytes.count - offset)
                    if done < 0 && errno == EINTR { continue }
                    if done <= 0 { break }
                    offset += done
                }
            }
            close(writer)
        }
    }
    // Both pipes read together until both end, so neither fills up and blocks the child.
    var outData = Data(), errData = Data()
    var open: [(fd: Int32, isOut: Bool)] = [(out.read, true), (err.read, false)]
    var buffer = [UInt8](repeating: 0, count: 65536)
    while !open.isEmpty {
        var polled = open.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
        let ready = poll(&polled, nfds_t(polled.count), -1)
        if ready < 0 {
            if errno == EINTR { continue }
            break
        }
        var finished: [Int32] = []
        for (index, entry) in polled.enumerated() where entry.revents != 0 {
            let count = buffer.withUnsafeMutableBytes { read(entry.fd, $0.baseAddress, $0.count) }
            if count > 0 {
                if open[index].isOut { outData.append(contentsOf: buffer[0..<count]) } else { errData.append(contentsOf: buffer[0..<count]) }
            } else if count == 0 || errno != EINTR {
                finished.append(entry.fd)
            }
        }
        for fd in finished {
            close(fd)
            open.removeAll { $0.fd == fd }
        }
    }
    var status: Int32 = 0
    while waitpid(child, &status, 0) < 0 && errno == EINTR {}
    watchdog.cancel()
    let signal = status & 0x7f
    if signal != 0 {
        if signal == SIGKILL {
            throw SupportError("\(executable) \(arguments) did not finish within \(Int(timeout)) s and was killed")
        }
        return ProcessResult(status: signal, stdout: outData, stderr: String(decoding: errData, as: UTF8.self))
    }
    return ProcessResult(status: (status >> 8) & 0xff, stdout: outData, stderr: String(decoding: errData, as: UTF8.self))
}

/// Initialises `attributes` so that a child starts as from a shell: no blocked signals, every
/// signal's default action (flags: POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF, which the
/// caller sets with any of its own).
func startsAsFromAShell(_ attributes: inout posix_spawnattr_t) {
    posix_spawnattr_init(&attributes)
    var none = sigset_t(), all = sigset_t()
    sigemptyset(&none)
    sigfillset(&all)
    posix_spawnattr_setsigmask(&attributes, &none)
    posix_spawnattr_setsigdefault(&attributes, &all)
}

@_silgen_name("pipe2")
private func makePipe2(_ fds: UnsafeMutablePointer<Int32>, _ flags: Int32) -> Int32

@_silgen_name("posix_spawn_file_actions_addchdir_np")
private func spawnAddChdir(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ path: UnsafePointer<CChar>) -> Int32

/// Finds a program on PATH.
public func which(_ name: String) throws -> String {
    for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
        let candidate = "\(directory)/\(name)"
        if access(candidate, X_OK) == 0 { return candidate }
    }
    throw SupportError("\(name) is not installed (not on PATH); .ci/run installs the peers the tests need")
}

/// A fresh directory under /tmp, removed when the value is released.
public final class TemporaryDirectory: @unchecked Sendable {
    public let path: String

    public init() throws {
        var template = Array("/tmp/signet-test-XXXXXX".utf8CString)
        guard let result = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw SupportError("mkdtemp failed: errno \(errno)")
        }
        path = String(cString: result)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    /// `path/name`.
    public func file(_ name: String) -> String { path + "/" + name }

    /// Writes `data` to `path/name` and returns the full path.
    @discardableResult
    public func write(_ name: String, _ data: Data, mode: Int = 0o644) throws -> String {
        let full = file(name)
        try data.write(to: URL(fileURLWithPath: full))
        chmod(full, mode_t(mode))
        return full
    }

    /// Random bytes, written to `path/name`.
    @discardableResult
    /// Filled in bulk (/dev/urandom in 32 MiB reads): `UInt8.random` is one system call per
    /// byte on Linux, about 0.6 s a MiB (issue 50).
    public func writeRandom(_ name: String, count: Int) throws -> String {
        try write(name, Data(try randomBytes(count)))
    }
}

/// `count` random bytes from /dev/urandom, read in bulk: `UInt8.random` is one `getrandom`
/// system call a byte on Linux (issue 50: ~200 s of CPU across the suite).
public func randomBytes(_ count: Int) throws -> [UInt8] {
    var bytes = [UInt8](repeating: 0, count: count)
    let fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw SupportError("cannot open /dev/urandom: \(errno)") }
    defer { close(fd) }
    var filled = 0
    while filled < count {
        let got = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + filled, min(count - filled, 32 << 20)) }
        guard got > 0 else { throw SupportError("cannot read /dev/urandom: \(errno)") }
        filled += got
    }
    return bytes
}

/// `count` bytes of a seeded generator, eight at a time (a byte at a time was the cost).
public func randomBytes<G: RandomNumberGenerator>(_ count: Int, using generator: inout G) -> [UInt8] {
    var bytes = [UInt8]()
    bytes.reserveCapacity(count + 8)
    while bytes.count < count { withUnsafeBytes(of: generator.next()) { bytes.append(contentsOf: $0) } }
    return Array(bytes.prefix(count))
}

/// Reads a whole file (test inputs only). Read with open/read rather than Foundation, whose
/// readers leak a 4 KiB buffer for each empty file (see .ci/lsan-suppressions.txt): tests poll
/// files that are often still empty.
public func contents(_ path: String) throws -> Data {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw SupportError("cannot open \(path): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var data = Data()
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count < 0 {
            if errno == EINTR { continue }
            throw SupportError("cannot read \(path): \(String(cString: strerror(errno)))")
        }
        if count == 0 { return data }
        data.append(contentsOf: buffer[0..<count])
    }
}

/// Hex to bytes; traps on bad input (test vectors are trusted to be hex).
public func bytes(hex: String) -> [UInt8] {
    var out: [UInt8] = []
    out.reserveCapacity(hex.utf8.count / 2)
    var iterator = hex.utf8.makeIterator()
    func nibble(_ c: UInt8) -> UInt8 {
        switch c {
        case 48...57: return c - 48
        case 97...102: return c - 87
        case 65...70: return c - 55
        default: fatalError("not hex: \(c)")
        }
    }
    while let high = iterator.next(), let low = iterator.next() {
        out.append(nibble(high) << 4 | nibble(low))
    }
    return out
}

/// The `openssl dgst` arguments that select one of Signet's algorithms.
public func opensslDigestArguments(_ algorithmID: String) -> [String] {
    switch algorithmID {
    case "rsa-pkcs1v15-sha384": return ["-sha384"]
    case "rsa-pkcs1v15-sha512": return ["-sha512"]
    case "rsa-pss-sha256":
        return ["-sha256", "-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:digest", "-sigopt", "rsa_mgf1_md:sha256"]
    default: return ["-sha256"]
    }
}

/// A small filesystem mounted for one test (tmpfs to run out of space, ramfs for no user
/// xattrs). Mounting needs root: elsewhere `mount` returns nil after printing what goes untested.
/// Unmount with `defer { mount.unmount() }` (not on release: ARC may end a lifetime early).
public final class ScratchMount {
    public let path: String

    private init(path: String) { self.path = path }

    public static func mount(_ type: String, options: String, at path: String, untested: String) throws -> ScratchMount? {
        guard getuid() == 0 else {
            print("skipped: mounting \(type) needs root (\(untested) is then untested here)")
            return nil
        }
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        let mounted = try run("mount", ["-t", type, "-o", options, type, path])
        guard mounted.status == 0 else {
            print("skipped: cannot mount \(type) here (\(mounted.stderr.trimmingCharacters(in: .whitespacesAndNewlines))); \(untested) is untested")
            return nil
        }
        return ScratchMount(path: path)
    }

    public func unmount() { _ = try? run("umount", [path]) }
}

/// An installed tree's `.signet/signatures` (FORMAT.md §3), read as a test reads it: the header
/// `signet-signatures/2 LENGTH`, then each file's signature in the manifest's order.
public struct RecordedSignatures {
    public let tree: String
    public var path: String { tree + "/.signet/signatures" }

    public init(_ tree: String) { self.tree = tree }

    /// The manifest's paths, in order (read with JSONSerialization, independently of Signet).
    public func order() throws -> [String] {
        let manifest = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: tree + "/.signet/manifest.json"))) as? [String: Any]
        return ((manifest?["files"] as? [[String: Any]]) ?? []).compactMap { $0["path"] as? String }
    }

    /// The header's LENGTH and where the first signature starts.
    public func layout() throws -> (length: Int, start: Int) {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        guard let newline = bytes.firstIndex(of: 0x0A) else { throw Unexpected("\(path) has no header line") }
        let header = String(decoding: bytes[..<newline], as: UTF8.self)
        guard header.hasPrefix("signet-signatures/2 "), let length = Int(header.dropFirst(20)) else { throw Unexpected("\(path): header \(header)") }
        return (length, newline + 1)
    }

    /// The signature recorded for `file`.
    public func signature(of file: String) throws -> Data {
        let (length, start) = try layout()
        guard let index = try order().firstIndex(of: file) else { throw Unexpected("\(file) is not in the manifest of \(tree)") }
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        return bytes.subdata(in: start + index * length..<start + (index + 1) * length)
    }

    /// Overwrites the signature recorded for `file` with `bytes` (random when nil).
    public func replace(_ file: String, with bytes: Data? = nil) throws {
        let (length, start) = try layout()
        guard let index = try order().firstIndex(of: file) else { throw Unexpected("\(file) is not in the manifest of \(tree)") }
        var all = try Data(contentsOf: URL(fileURLWithPath: path))
        let replacement = try bytes ?? Data(randomBytes(length))
        all.replaceSubrange(start + index * length..<start + (index + 1) * length, with: replacement)
        try all.write(to: URL(fileURLWithPath: path))
    }
}

/// A test precondition that did not hold.
public struct Unexpected: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// Waits up to 5 s for a server on loopback `port` to accept connections; false if it never did.
public func awaitListening(_ port: Int) throws -> Bool {
    for _ in 0..<100 {
        if try run("python3", ["-c", "import socket; socket.create_connection(('127.0.0.1', \(port)), 0.2)"]).status == 0 { return true }
        usleep(50_000)
    }
    return false
}

/// The files Signet keeps beside an installed DIR on purpose (FORMAT.md §2): its lock
/// (`.DIR.signet-lock`), its release record (`.DIR.signet-release`) and the previous release
/// kept for a rollback (`.DIR.signet-previous`, issue 39). Anything else named `.DIR.signet-…`
/// is a temporary that must not outlive its run.
public func isKeptBesideDestination(_ name: String) -> Bool {
    name.hasSuffix(".signet-lock") || name.hasSuffix(".signet-release") || name.hasSuffix(".signet-previous")
}

/// Runs `executable` under a clock `offset` ahead (libfaketime's `+8d`). The `faketime`
/// wrapper names its semaphore and shared memory by its pid and leaves them behind now and
/// then (measured here: a dozen in /dev/shm after a day's runs); a later wrapper that draws
/// that pid fails with `sem_open: File exists` (seen in CI). So each run gets a private
/// /dev/shm: its own mount namespace (the tests run as root), nothing shared with any other.
/// Preloading libfaketime without the wrapper is no way out: version 0.9.10 then loses the
/// arguments of a Swift program. An ASan build's allocator is kept off the clock (see
/// `sanitizerOptions`), or the child hangs.
public func runUnderFakedClock(
    _ offset: String, _ executable: String, _ arguments: [String],
    timeout: Double = 300
) throws -> ProcessResult {
    let script = #"mount -t tmpfs -o size=1m,mode=1777 signet-test-shm /dev/shm && exec faketime -f "$@""#
    return try run(
        "unshare", ["--mount", "--propagation", "private", "sh", "-c", script, "sh", offset, executable] + arguments,
        environment: sanitizerOptions(adding: "allocator_release_to_os_interval_ms=-1"), timeout: timeout)
}

/// This process's `ASAN_OPTIONS` with `options` appended, for a child that an ASan build of
/// Signet (CI's second suite) must run differently: under ptrace LeakSanitizer cannot run
/// (`detect_leaks=0`); under libfaketime the allocator must not read the clock, or its first
/// `clock_gettime` recurses into libfaketime's unfinished start-up and the child hangs
/// (`allocator_release_to_os_interval_ms=-1`). Harmless for a build without ASan.
public func sanitizerOptions(adding options: String) -> [String: String?] {
    let current = ProcessInfo.processInfo.environment["ASAN_OPTIONS"]
    return ["ASAN_OPTIONS": [current, options].compactMap { $0 }.joined(separator: ":")]
}

/// The source of a Python helper kept as a file in the `Python/` folder beside the Swift file
/// that calls this (`python3 -c SOURCE ARGS`): Python is read as Python, not as a Swift string.
/// A missing file is a helper that fails with its name, never a silent pass.
public func pythonScript(_ name: String, beside file: StaticString = #filePath) -> String {
    let folder = URL(fileURLWithPath: "\(file)").deletingLastPathComponent().appendingPathComponent("Python")
    let path = folder.appendingPathComponent(name).path
    return (try? String(contentsOfFile: path, encoding: .utf8)) ?? "raise SystemExit('the Python helper \(path) is missing')"
}
