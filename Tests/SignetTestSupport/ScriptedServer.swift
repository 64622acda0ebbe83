import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A small HTTP server on loopback (python3's http.server, plain http: the tests give
/// `--allow-http`) whose answers follow a script, for the hostile and unlucky servers that
/// nginx cannot play: a connection cut after K bytes, a retry answered with only the rest of
/// the file, no validators. Each path has a list of answers, one per request, the last one
/// repeated; every request is logged as `PATH RANGE-HEADER` in ``requests``.
public final class ScriptedServer {
    /// One answer.
    public struct Answer: Codable, Sendable {
        /// HTTP status.
        public var status: Int
        /// The bytes of the file to send: `from` up to `to` (exclusive; nil for the end).
        public var from: Int
        public var to: Int?
        /// The Content-Length to announce (nil: the bytes sent).
        public var length: Int?
        /// Close the connection after this many body bytes (nil: send them all).
        public var cutAfter: Int?
        /// Extra headers.
        public var headers: [String: String]
        /// Answer a Range header as a server should (206, Content-Range), a full 200 without one.
        public var honourRange: Bool
        /// Lies in a range answer: Content-Range shifted by this many bytes; bytes added after the range.
        public var shiftRange: Int
        public var extraBytes: Int
        /// In a range answer (or a part of a multipart one) that holds this file offset: the
        /// bytes before it are sent, then the connection is cut (a link dropping inside an entry)...
        public var cutAt: Int?
        /// ... or, with `stall`, the server sends nothing more for 60 s instead (a time-out); in
        /// a multipart answer it first creates ``stalledMarker``, for a test to act on.
        public var stall: Bool
        /// How a request for several ranges is answered (with `honourRange`).
        public var parts: Parts
        /// A suffix range (`bytes=-N`) answered as 206 with the whole file from its first byte
        /// (`bytes 0-(N-1)/N`): more than was asked.
        public var suffixFromStart: Bool
        /// Pauses in a 200 or 206 answer, multipart too (counted in body bytes sent; one at or
        /// past the body's end is not reached, so a short answer passes): a server
        /// that pauses after N bytes, so that a test has a transfer in flight without a
        /// throttled one (see ``Pause``).
        public var pauses: [Pause]

        /// A pause after `after` body bytes: for `milliseconds`, or (nil) until the test calls
        /// ``ScriptedServer/release()``. The server marks each pause it reaches
        /// (``ScriptedServer/awaitPause(timeout:)``), and once the answer ends it records whether
        /// the rest reached a listening client (``ScriptedServer/finished``).
        public struct Pause: Codable, Sendable {
            public var after: Int
            public var milliseconds: Int?
            public init(after: Int, milliseconds: Int? = nil) {
                self.after = after
                self.milliseconds = milliseconds
            }
        }

        /// Answers to a request for several ranges: `multipart/byteranges` as a server should,
        /// or one of the ways a server may do otherwise (honestly or not).
        public enum Parts: String, Codable, Sendable {
            /// A part per range, in order.
            case honest
            /// Only the first range, as a plain 206 (a server that serves one range).
            case firstOnly
            /// One part from the first range's start to the last's end (coalesced).
            case coalesced
            /// The whole file with 200 (a server without multipart answers).
            case whole
            /// The parts in reverse order.
            case reversed
            /// The second part's Content-Range shifted by one byte (bytes not asked for).
            case shiftedSecond
            /// The second part one byte longer than its Content-Range says.
            case longerSecond
            /// No closing delimiter.
            case unclosed
            /// A delimiter other than the Content-Type's boundary.
            case wrongBoundary
            /// 64 KiB after the closing delimiter.
            case endlessEpilogue
        }

        public init(
            status: Int = 200, from: Int = 0, to: Int? = nil, length: Int? = nil, cutAfter: Int? = nil, headers: [String: String] = [:],
            honourRange: Bool = false, shiftRange: Int = 0, extraBytes: Int = 0, cutAt: Int? = nil, stall: Bool = false, parts: Parts = .honest,
            suffixFromStart: Bool = false, pauses: [Pause] = []
        ) {
            self.suffixFromStart = suffixFromStart
            self.pauses = pauses
            self.status = status
            self.from = from
            self.to = to
            self.length = length
            self.cutAfter = cutAfter
            self.headers = headers
            self.honourRange = honourRange
            self.shiftRange = shiftRange
            self.extraBytes = extraBytes
            self.cutAt = cutAt
            self.stall = stall
            self.parts = parts
        }
    }

    public let directory: TemporaryDirectory
    public let port: Int
    private let process: Process

    /// Serves files of `directory` ("www/PATH"); `script` maps a path (without the leading
    /// slash) to its answers. Paths not in the script are served whole with 200.
    /// With `tls` (a PEM chain and its key), the server speaks HTTPS and ``url(_:)`` names
    /// `https://localhost`.
    public let tls: (chain: String, key: String)?

    public init(script: [String: [Answer]], tls: (chain: String, key: String)? = nil) throws {
        self.tls = tls
        directory = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: directory.file("www"), withIntermediateDirectories: true)
        let plan = try JSONEncoder().encode(script)
        let planPath = try directory.write("script.json", plan)
        let server = pythonScript("scripted_server.py")
        let scriptPath = try directory.write("server.py", Data(server.utf8))
        process = Process()
        process.executableURL = URL(fileURLWithPath: try which("python3"))
        process.arguments = [scriptPath, directory.file("www"), planPath, directory.file("requests.log")] + (tls.map { [$0.chain, $0.key] } ?? [])
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        ExitCleanup.stopAtExit(process.processIdentifier, signal: SIGKILL)
        // The first line is the port the kernel chose.
        var line = Data()
        while let byte = try out.fileHandleForReading.read(upToCount: 1), !byte.isEmpty, byte != Data([0x0A]) { line.append(byte) }
        guard let port = Int(String(decoding: line, as: UTF8.self)) else {
            kill(process.processIdentifier, SIGKILL)
            throw SupportError("the scripted server did not start")
        }
        self.port = port
    }

    /// Created when a multipart answer stalls (``Answer/stall``), holding the offset in the file
    /// where the bytes of the last part sent end.
    public var stalledMarker: String { directory.file("requests.log.stalled") }

    /// Where `path` is served from.
    public func file(_ path: String) -> String { directory.file("www/" + path) }

    public func url(_ path: String) -> String { tls == nil ? "http://127.0.0.1:\(port)/\(path)" : "https://localhost:\(port)/\(path)" }

    /// Each request's Accept-Encoding header ("-" for none), in order.
    public var acceptEncodings: [String] {
        ((try? String(contentsOfFile: directory.file("requests.log.encodings"), encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// Replaces the script: the next request follows `script`, its answers counted anew.
    public func replace(script: [String: [Answer]]) throws {
        let path = directory.file("script.json")
        try JSONEncoder().encode(script).write(to: URL(fileURLWithPath: path + ".new"))
        // A later modification time than the old one's, even within the same clock tick.
        if let previous = try? FileManager.default.attributesOfItem(atPath: path)[.modificationDate] as? Date {
            try FileManager.default.setAttributes([.modificationDate: previous.addingTimeInterval(1)], ofItemAtPath: path + ".new")
        }
        guard rename(path + ".new", path) == 0 else { throw SupportError("cannot replace the script: \(errno)") }
    }

    /// Lets a paused answer (a ``Answer/Pause`` without a duration) go on.
    public func release() throws {
        try Data().write(to: URL(fileURLWithPath: directory.file("requests.log.release")))
    }

    /// Waits until an answer reached a pause: true once it has (polled; the server marks it).
    public func awaitPause(timeout: Double = 30) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if FileManager.default.fileExists(atPath: directory.file("requests.log.paused")) { return true }
            usleep(5_000)
        }
        return false
    }

    /// How the last paused answer ended: "sent" (the client read the rest), "disconnected"
    /// (the client had gone), nil (not yet). Waits up to `timeout` seconds for it.
    public func finished(timeout: Double = 30) -> String? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let text = try? String(contentsOfFile: directory.file("requests.log.finished"), encoding: .utf8) { return text }
            usleep(5_000)
        }
        return nil
    }

    /// Each request so far: the path and its Range header ("-" for none).
    public var requests: [String] {
        ((try? String(contentsOfFile: directory.file("requests.log"), encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    deinit {
        // SIGKILL: the test runner may ignore SIGTERM, and python3 inherits that.
        ExitCleanup.forget(process.processIdentifier)
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
