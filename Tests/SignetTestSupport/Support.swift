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
/// A program still running after `timeout` seconds is killed, and the call throws: a hang is a
/// test failure, never a stuck CI run.
@discardableResult
public func run(_ executable: String, _ arguments: [String], input: Data? = nil,
                environment: [String: String?] = [:], directory: String? = nil,
                timeout: Double = 300) throws -> ProcessResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable.hasPrefix("/") ? executable : try which(executable))
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    for (key, value) in environment { env[key] = value }
    process.environment = env
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
    let stdoutPipe = Pipe(), stderrPipe = Pipe()
    process.standardOutput = stdoutPipe
    process.standardError = stderrPipe
    let stdinPipe = Pipe()
    if input != nil { process.standardInput = stdinPipe } else { process.standardInput = FileHandle.nullDevice }
    try process.run()
    let watchdog = DispatchWorkItem { [process] in
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
    DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: watchdog)
    defer { watchdog.cancel() }
    if let input {
        stdinPipe.fileHandleForWriting.write(input)
        try stdinPipe.fileHandleForWriting.close()
    }
    // Read both pipes concurrently so neither fills up and blocks the child.
    let group = DispatchGroup()
    nonisolated(unsafe) var errData = Data()
    group.enter()
    DispatchQueue.global().async {
        errData = stderrPipe.fileHandleForReading.readDataToEndOfFile()
        group.leave()
    }
    let outData = stdoutPipe.fileHandleForReading.readDataToEndOfFile()
    group.wait()
    process.waitUntilExit()
    if process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGKILL {
        throw SupportError("\(executable) \(arguments) did not finish within \(Int(timeout)) s and was killed")
    }
    return ProcessResult(status: process.terminationStatus, stdout: outData, stderr: String(decoding: errData, as: UTF8.self))
}

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
    public func writeRandom(_ name: String, count: Int) throws -> String {
        var bytes = [UInt8](repeating: 0, count: count)
        var generator = SystemRandomNumberGenerator()
        for index in bytes.indices { bytes[index] = UInt8.random(in: 0...255, using: &generator) }
        return try write(name, Data(bytes))
    }
}

/// Reads a whole file (test inputs only).
public func contents(_ path: String) throws -> Data {
    try Data(contentsOf: URL(fileURLWithPath: path))
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
        return bytes.subdata(in: start + index * length ..< start + (index + 1) * length)
    }

    /// Overwrites the signature recorded for `file` with `bytes` (random when nil).
    public func replace(_ file: String, with bytes: Data? = nil) throws {
        let (length, start) = try layout()
        guard let index = try order().firstIndex(of: file) else { throw Unexpected("\(file) is not in the manifest of \(tree)") }
        var all = try Data(contentsOf: URL(fileURLWithPath: path))
        let replacement = bytes ?? Data((0..<length).map { _ in UInt8.random(in: 0...255) })
        all.replaceSubrange(start + index * length ..< start + (index + 1) * length, with: replacement)
        try all.write(to: URL(fileURLWithPath: path))
    }
}

/// A test precondition that did not hold.
public struct Unexpected: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
