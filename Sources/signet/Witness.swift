import ArgumentParser
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import Signet
internal import CSignetSystem

/// `signet witness serve`: a witness of c2sp.org/tlog-witness for tests and small fleets.
struct Witness: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "witness",
        abstract: "Run a transparency-log witness (c2sp.org/tlog-witness).",
        subcommands: [Serve.self]
    )

    struct Serve: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "serve",
            abstract: "Cosign the checkpoints of known logs that extend the last one seen.",
            usage: """
                signet witness serve --listen <address> --key <key.pem>
                                     --name <name> --log <vkey> [--log <vkey> ...]
                                     --state <dir>
                """,
            discussion: """
                Answers POST PREFIX/add-checkpoint over plain HTTP on ADDRESS (put it behind a \
                TLS proxy to serve it beyond this host): 200 and the cosignature, 404 for an \
                unknown log, 403 for a checkpoint no known log key signed, 400 for a malformed \
                request, 409 (with the size it holds) for another old size, 422 for a consistency \
                proof that does not verify. STATE keeps the latest checkpoint cosigned per log; \
                requests are served one at a time, so its check and update are one step.

                Example:
                  signet log vkey w1.pem --name witness1.example --witness
                  signet witness serve --listen 127.0.0.1:7380 --key w1.pem \\
                    --name witness1.example --log 'example.com/app-log+…' --state /var/lib/w1
                """)
        @Option(name: .long, help: ArgumentHelp("HOST:PORT to listen on (IPv4; port 0: any, printed).", valueName: "address"))
        var listen: String
        @Option(name: .long, help: ArgumentHelp("The witness's Ed25519 private key (PEM).", valueName: "key.pem"))
        var key: String
        @Option(name: .long, help: ArgumentHelp("The witness's name (its key's name).", valueName: "name"))
        var name: String
        @Option(name: .long, help: ArgumentHelp("A log's verifier key to witness; repeatable.", valueName: "vkey"))
        var log: [String] = []
        @Option(name: .long, help: ArgumentHelp("The folder of latest cosigned checkpoints.", valueName: "dir"))
        var state: String
        @OptionGroup var output: OutputOptions

        struct Report: Encodable {
            let vkey: String
            let url: String
        }

        func run() throws {
            guard !log.isEmpty else { throw ValidationError("name at least one log to witness (--log VKEY)") }
            let signer = try Log.signer(key, name: name, policy: nil, witness: true)
            let logs = try log.map { try NoteVerifierKey($0) }
            if mkdir(state, 0o700) != 0, errno != EEXIST {
                throw SignetError.posix(SystemCallFailure("mkdir", code: errno), "cannot make the state folder", path: state)
            }
            let witness = try TransparencyWitness(key: signer, logs: logs, stateDirectory: state)
            let listener = try Self.listen(listen)
            defer { close(listener.fd) }
            // Written at once (not buffered): whoever started the witness waits for this line
            // (with --json, one document on one line).
            if output.json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                let document = try encoder.encode(Report(vkey: signer.verifier.description, url: "http://\(listener.address)"))
                FileHandle.standardOutput.write(document + Data("\n".utf8))
            } else {
                FileHandle.standardOutput.write(Data("witness \(signer.verifier) listening on http://\(listener.address)\n".utf8))
            }
            while true {
                let client = signet_accept_cloexec(listener.fd)
                guard client >= 0 else {
                    if errno == EINTR { continue }
                    throw SignetError.posix(SystemCallFailure("accept", code: errno), "cannot accept a connection", path: listen)
                }
                Self.serve(client, witness)
                close(client)
            }
        }

        /// One request on `fd`: read with a 10 s limit, answered, closed.
        static func serve(_ fd: Int32, _ witness: TransparencyWitness) {
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var received: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 16 << 10)
            let headerLimit = 16 << 10
            var headerEnd: Int? = nil
            func answer(_ status: Int, _ type: String, _ body: [UInt8]) {
                let reason =
                    [
                        200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 409: "Conflict", 411: "Length Required",
                        413: "Content Too Large", 422: "Unprocessable Entity"
                    ][status] ?? "Error"
                let head = "HTTP/1.1 \(status) \(reason)\r\nContent-Type: \(type)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
                let bytes = Array(head.utf8) + body
                var sent = 0
                while sent < bytes.count {
                    let n = bytes[sent...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if n <= 0 { return }
                    sent += n
                }
            }
            func text(_ status: Int, _ message: String) { answer(status, "text/plain; charset=utf-8", Array((message + "\n").utf8)) }
            while headerEnd == nil {
                let n = recv(fd, &buffer, buffer.count, 0)
                guard n > 0 else { return }
                received += buffer[..<n]
                headerEnd = received.indices.dropLast(3).first {
                    received[$0] == 13 && received[$0 + 1] == 10 && received[$0 + 2] == 13 && received[$0 + 3] == 10
                }
                if headerEnd == nil, received.count > headerLimit { return text(400, "the request's header is longer than \(headerLimit) bytes") }
            }
            let end = headerEnd!
            guard end <= headerLimit else { return text(400, "the request's header is longer than \(headerLimit) bytes") }
            let head = String(decoding: received[..<end], as: UTF8.self).split(separator: "\r\n", omittingEmptySubsequences: false)
            let requestLine = head.first?.split(separator: " ") ?? []
            guard requestLine.count == 3, requestLine[2].hasPrefix("HTTP/1.") else { return text(400, "not an HTTP/1.x request") }
            guard requestLine[1].hasSuffix("/add-checkpoint") else { return text(404, "this witness answers POST …/add-checkpoint only") }
            guard requestLine[0] == "POST" else { return text(405, "add-checkpoint is a POST") }
            var length: Int? = nil
            for line in head.dropFirst() {
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2 else { continue }
                let field = parts[0].lowercased()
                let value = parts[1].trimmingCharacters(in: .whitespaces)
                if field == "transfer-encoding" { return text(411, "send the body with a Content-Length") }
                if field == "content-length" {
                    guard length == nil, !value.isEmpty, value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = Int(value.prefix(9)), value.count <= 9
                    else {
                        return text(400, "one Content-Length of decimal digits")
                    }
                    length = n
                }
            }
            guard let length else { return text(411, "send the body with a Content-Length") }
            guard length <= TransparencyWitness.largestRequest else { return text(413, "the body is longer than \(TransparencyWitness.largestRequest) bytes") }
            var body = Array(received[(end + 4)...])
            while body.count < length {
                let n = recv(fd, &buffer, min(buffer.count, length - body.count), 0)
                guard n > 0 else { return }
                body += buffer[..<n]
            }
            guard body.count == length else { return text(400, "more bytes than the Content-Length") }
            let result = witness.addCheckpoint(body, now: UInt64(max(0, time(nil))))
            answer(result.status, result.contentType, result.body)
        }

        /// A listening TCP socket on HOST:PORT (IPv4), and the address it got.
        static func listen(_ address: String) throws -> (fd: Int32, address: String) {
            let parts = address.split(separator: ":")
            guard parts.count == 2, let port = UInt16(parts[1]) else { throw ValidationError("--listen takes HOST:PORT (127.0.0.1:7380), not '\(address)'") }
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = port.bigEndian
            guard inet_pton(AF_INET, String(parts[0]), &addr.sin_addr) == 1 else { throw ValidationError("--listen: '\(parts[0])' is not an IPv4 address") }
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw SignetError.posix(SystemCallFailure("socket", code: errno), "cannot listen", path: address) }
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            let bound = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0, Glibc.listen(fd, 16) == 0 else {
                let code = errno
                close(fd)
                throw SignetError.posix(SystemCallFailure("bind", code: code), "cannot listen", path: address)
            }
            var got = sockaddr_in()
            var size = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &got) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &size) } }
            return (fd, "\(parts[0]):\(UInt16(bigEndian: got.sin_port))")
        }
    }
}
