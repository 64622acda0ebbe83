import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A real nginx on loopback serving HTTPS with a certificate chain made by the openssl CLI:
/// a private root, an intermediate, and a leaf for localhost (only).
///
/// One nginx per test process: suites and tests take a site of their own on it
/// (``site(_:)``): a folder below its document root, named in every URL and log lookup the site
/// makes, with the server's certificates and log beside it as for a server of its own. The
/// pausing and special locations (`stall/`, `stallfirst/`, `norange/`, `to-http`, …) apply below any site.
public final class HTTPSServer {
    public let directory: TemporaryDirectory
    public let port: Int
    /// A second server, same root and host name, whose leaf certificate has expired.
    public let expiredPort: Int
    /// The site's folder below the server's document root ("" for the server itself).
    public let prefix: String
    /// The server a site is on (nil: this is the server).
    private let owner: HTTPSServer?
    public var www: String { directory.file("www") }
    // A site's certificates and log are the server's own files (not the links beside the
    // site's www/, whose size would be the link's).
    public var root: String { owner?.root ?? directory.file("root.pem") }
    public var intermediate: String { owner?.intermediate ?? directory.file("int.pem") }
    public var leaf: String { owner?.leaf ?? directory.file("leaf.pem") }
    public var otherRoot: String { owner?.otherRoot ?? directory.file("other-root.pem") }
    public var accessLog: String { owner?.accessLog ?? directory.file("access.log") }
    /// The server's chain and key, for a ``ScriptedServer`` that speaks as this server does
    /// (same host name, same pins).
    public var tls: (chain: String, key: String) {
        owner?.tls ?? (directory.file("chain.pem"), directory.file("leaf.key"))
    }
    private let process: Process?

    /// The process's one nginx, started on first use.
    nonisolated(unsafe) public static let shared = Result { try HTTPSServer() }
    private static let sites = Mutex(0)

    /// A site of its own on the process's nginx: `www` is a folder of the server's document root
    /// named after `name` (and made unique), `url(_:)`, `statuses(of:)` and `answers(of:)` name
    /// paths below it; the certificates, pins and the access log are the server's.
    public static func site(_ name: String) throws -> HTTPSServer {
        let server = try shared.get()
        let number = sites.withLock { count in
            count += 1
            return count
        }
        return try HTTPSServer(site: "\(name)-\(number)", on: server)
    }

    private init(site prefix: String, on owner: HTTPSServer) throws {
        self.owner = owner
        self.prefix = prefix
        port = owner.port
        expiredPort = owner.expiredPort
        process = nil
        directory = try TemporaryDirectory()
        // The site's folder looks like a server's own: its www/ is the site's folder on the
        // server, and every other file (certificates, keys, the log) is the server's.
        let www = owner.www + "/" + prefix
        // The folders a server's www/ starts with (TestCertificates), for the locations below.
        for folder in ["stall", "stallfirst", "norange", "whole"] {
            try FileManager.default.createDirectory(atPath: www + "/" + folder, withIntermediateDirectories: true)
        }
        try FileManager.default.createSymbolicLink(atPath: directory.file("www"), withDestinationPath: www)
        for name in try FileManager.default.contentsOfDirectory(atPath: owner.directory.path) where name != "www" {
            try FileManager.default.createSymbolicLink(atPath: directory.file(name), withDestinationPath: owner.directory.file(name))
        }
    }

    /// `path` as the server sees it: below the site's folder.
    private func served(_ path: String) -> String { prefix.isEmpty ? path : prefix + "/" + path }

    public func url(_ path: String, host: String = "localhost") -> String { "https://\(host):\(port)/\(served(path))" }

    /// The URL path of `path` on the server (`/SITE/path`), for URLs a test spells itself.
    public func path(_ path: String) -> String { "/" + served(path) }

    /// `https://localhost:PORT` and the site's folder: what a URL below the site starts with.
    public var base: String { "https://localhost:\(port)" + (prefix.isEmpty ? "" : "/" + prefix) }

    /// The `sha256//` pin of a PEM certificate's public key, as the openssl CLI computes it.
    public func pin(_ certificate: String) throws -> String {
        let script = "openssl x509 -in '\(certificate)' -pubkey -noout | openssl pkey -pubin -outform DER | openssl dgst -sha256 -binary | base64"
        return "sha256//" + (try run("bash", ["-c", script]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// The HTTP statuses nginx logged for GET requests of `/path`, in order.
    public func statuses(of path: String) throws -> [Int] {
        // Foundation (6.3.1) leaks its read buffer when it reads an empty file: check first.
        let size = (try? FileManager.default.attributesOfItem(atPath: accessLog)[.size] as? Int) ?? 0
        guard size > 0 else { return [] }
        let log = (try? String(contentsOfFile: accessLog, encoding: .utf8)) ?? ""
        return log.split(separator: "\n").compactMap { line in
            guard let request = line.range(of: "\"GET /\(served(path)) ") else { return nil }
            let rest = line[request.upperBound...]
            guard let close = rest.firstIndex(of: "\"") else { return nil }
            return rest[rest.index(after: close)...].split(separator: " ").first.flatMap { Int($0) }
        }
    }

    /// For GET requests of `/path` logged from byte `offset` of the access log on: each
    /// answer's status and body bytes sent.
    public func answers(of path: String, from offset: Int = 0) throws -> [(status: Int, bytes: Int)] {
        try Self.answers(inLog: accessLog, of: served(path), from: offset)
    }

    /// The same for any server's access log whose lines hold `"GET /PATH HTTP/…" STATUS BYTES`
    /// (nginx's default, and the format the Apache and lighttpd test servers are given).
    public static func answers(inLog accessLog: String, of path: String, from offset: Int = 0) throws -> [(status: Int, bytes: Int)] {
        let size = (try? FileManager.default.attributesOfItem(atPath: accessLog)[.size] as? Int) ?? 0
        guard size > offset else { return [] }
        let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: accessLog))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64(offset))
        let log = String(decoding: try handle.readToEnd() ?? Data(), as: UTF8.self)
        return log.split(separator: "\n").compactMap { line in
            guard let request = line.range(of: "\"GET /\(path) ") else { return nil }
            let rest = line[request.upperBound...]
            guard let close = rest.firstIndex(of: "\"") else { return nil }
            let fields = rest[rest.index(after: close)...].split(separator: " ")
            guard fields.count >= 2, let status = Int(fields[0]) else { return nil }
            return (status, Int(fields[1]) ?? 0) // "-" for no body
        }
    }

    /// The access log's size now (an offset for ``answers(of:from:)``).
    public var accessLogSize: Int { (try? FileManager.default.attributesOfItem(atPath: accessLog)[.size] as? Int) ?? 0 }

    public init() throws {
        owner = nil
        prefix = ""
        directory = try TemporaryDirectory()
        let d = directory.path
        try TestCertificates.make(in: d)
        // A free loopback port: bind to 0 and read what the kernel chose.
        let portText = try run(
            "python3",
            [
                "-c",
                "import socket; a=socket.socket(); a.bind(('127.0.0.1',0)); b=socket.socket(); b.bind(('127.0.0.1',0)); print(a.getsockname()[1], b.getsockname()[1])"
            ]
        ).stdoutText
        let ports = portText.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        guard ports.count == 2 else { throw SupportError("no free port") }
        let port = ports[0]
        self.port = port
        self.expiredPort = ports[1]
        let config = """
            daemon off;
            \(geteuid() == 0 ? "user root root;" : "")
            pid \(d)/nginx.pid;
            error_log \(d)/error.log;
            worker_processes 1;
            events { worker_connections 64; }
            http {
              access_log \(d)/access.log;
              client_body_temp_path \(d)/tmp; proxy_temp_path \(d)/tmp; fastcgi_temp_path \(d)/tmp;
              uwsgi_temp_path \(d)/tmp; scgi_temp_path \(d)/tmp;
              # A server that pauses after N bytes (no throttle): 320 KiB at full speed, then a
              # byte a second, so that a test has a transfer in flight to kill or cut off. Below
              # stallfirst/ and norange/, only a request without a Range header pauses (the
              # one that resumes it does not).
              map $http_range $stallfirst_rate { "" 1; default 0; }
              server {
                listen 127.0.0.1:\(ports[1]) ssl;
                server_name localhost;
                ssl_certificate \(d)/expired-chain.pem;
                ssl_certificate_key \(d)/leaf.key;
                root \(d)/www;
              }
              server {
                listen 127.0.0.1:\(port) ssl;
                server_name localhost;
                ssl_certificate \(d)/chain.pem;
                ssl_certificate_key \(d)/leaf.key;
                root \(d)/www;
                # Each location at the root or below a site's folder (HTTPSServer.site).
                location ~ ^/([^/]+/)?stall/ { limit_rate_after 320k; limit_rate 1; }
                location ~ ^/([^/]+/)?stallfirst/ { limit_rate_after 320k; limit_rate $stallfirst_rate; }
                location ~ ^/([^/]+/)?norange/ { limit_rate_after 320k; limit_rate $stallfirst_rate; max_ranges 0; }
                location ~ ^/([^/]+/)?whole/ { max_ranges 0; }
                location ~ ^/([^/]+/)?to-http$ { return 302 http://localhost:\(port)/$1app.zip; }
                location ~ ^/([^/]+/)?to-https$ { return 302 https://localhost:\(port)/$1app.zip; }
              }
            }
            """
        let configPath = try directory.write("nginx.conf", Data(config.utf8))
        let nginx = FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx") ? "/usr/sbin/nginx" : try which("nginx")
        let process = Process()
        self.process = process
        process.executableURL = URL(fileURLWithPath: nginx)
        process.arguments = ["-c", configPath, "-p", d, "-e", d + "/error.log"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        ExitCleanup.stopAtExit(process.processIdentifier)
        // Ready when it accepts connections.
        if try awaitListening(port) { return }
        process.terminate()
        throw SupportError("nginx did not start: \((try? String(contentsOfFile: d + "/error.log", encoding: .utf8)) ?? "")")
    }

    deinit {
        guard let process else { return }
        ExitCleanup.forget(process.processIdentifier)
        process.terminate()
        process.waitUntilExit()
    }
}
