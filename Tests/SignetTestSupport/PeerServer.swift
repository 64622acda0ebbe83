import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A real Apache httpd 2.4 or lighttpd 1.4 (Debian's) on loopback serving HTTPS with the same
/// test PKI as ``HTTPSServer`` (nginx): CDN and mirror stand-ins, so that every HTTP behaviour
/// is tried on all three servers (issue 36). `www/norange/` is served without range support.
/// Their access logs hold `"GET /PATH HTTP/…" STATUS BODY-BYTES` (``answers(of:from:)``).
public final class PeerServer {
    public enum Kind: String, CaseIterable, Sendable {
        case apache, lighttpd
    }

    public let kind: Kind
    public let directory: TemporaryDirectory
    public let port: Int
    public var www: String { directory.file("www") }
    public var root: String { directory.file("root.pem") }
    public var accessLog: String { directory.file("access.log") }
    private let process: Process

    public func url(_ path: String) -> String { "https://localhost:\(port)/\(path)" }

    /// Each GET of `/path` logged from byte `offset` of the access log on: status and body bytes.
    public func answers(of path: String, from offset: Int = 0) throws -> [(status: Int, bytes: Int)] {
        try HTTPSServer.answers(inLog: accessLog, of: path, from: offset)
    }

    public var accessLogSize: Int { (try? FileManager.default.attributesOfItem(atPath: accessLog)[.size] as? Int) ?? 0 }

    public init(_ kind: Kind) throws {
        self.kind = kind
        directory = try TemporaryDirectory()
        let d = directory.path
        try TestCertificates.make(in: d)
        // Apache's workers run as www-data: they must reach www/ (not the keys: the parent reads those).
        chmod(d, 0o711)
        chmod(d + "/www", 0o755)
        chmod(d + "/www/norange", 0o755)
        let portText = try run("python3", ["-c", "import socket; a=socket.socket(); a.bind(('127.0.0.1',0)); print(a.getsockname()[1])"]).stdoutText
        guard let port = Int(portText.trimmingCharacters(in: .whitespacesAndNewlines)) else { throw SupportError("no free port") }
        self.port = port
        let process = Process()
        switch kind {
        case .apache:
            let modules = "/usr/lib/apache2/modules"
            let config = """
            ServerRoot \(d)
            ServerName localhost
            PidFile \(d)/apache.pid
            Mutex file:\(d)
            Listen 127.0.0.1:\(port)
            LoadModule mpm_event_module \(modules)/mod_mpm_event.so
            LoadModule authz_core_module \(modules)/mod_authz_core.so
            LoadModule mime_module \(modules)/mod_mime.so
            LoadModule headers_module \(modules)/mod_headers.so
            LoadModule socache_shmcb_module \(modules)/mod_socache_shmcb.so
            LoadModule ssl_module \(modules)/mod_ssl.so
            User www-data
            Group www-data
            TypesConfig /etc/mime.types
            ErrorLog \(d)/error.log
            LogFormat "%h %l %u %t \\"%r\\" %>s %B" plain
            CustomLog \(d)/access.log plain
            DocumentRoot \(d)/www
            <Directory />
              Require all granted
            </Directory>
            <Location /norange/>
              RequestHeader unset Range early
              Header unset Accept-Ranges
            </Location>
            SSLSessionCache none
            SSLEngine on
            SSLCertificateFile \(d)/chain.pem
            SSLCertificateKeyFile \(d)/leaf.key
            """
            let path = try directory.write("apache.conf", Data(config.utf8))
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/apache2")
            process.arguments = ["-f", path, "-DFOREGROUND"]
        case .lighttpd:
            let config = """
            server.document-root = "\(d)/www"
            server.bind = "127.0.0.1"
            server.port = \(port)
            server.pid-file = "\(d)/lighttpd.pid"
            server.errorlog = "\(d)/error.log"
            server.modules = ("mod_openssl", "mod_accesslog")
            # lighttpd caches a file's stat for a second: a package replaced within it is served stale.
            server.stat-cache-engine = "disable"
            accesslog.filename = "\(d)/access.log"
            accesslog.format = "%h %l %u %t \\"%r\\" %>s %b"
            ssl.engine = "enable"
            ssl.pemfile = "\(d)/chain.pem"
            ssl.privkey = "\(d)/leaf.key"
            $HTTP["url"] =~ "^/norange/" { server.range-requests = "disable" }
            """
            let path = try directory.write("lighttpd.conf", Data(config.utf8))
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/lighttpd")
            process.arguments = ["-D", "-f", path]
        }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = process
        ExitCleanup.stopAtExit(process.processIdentifier)
        for _ in 0..<100 {
            if try run("python3", ["-c", "import socket; socket.create_connection(('127.0.0.1', \(port)), 0.2)"]).status == 0 { return }
            usleep(50_000)
        }
        process.terminate()
        throw SupportError("\(kind) did not start: \((try? String(contentsOfFile: d + "/error.log", encoding: .utf8)) ?? "")")
    }

    deinit {
        ExitCleanup.forget(process.processIdentifier)
        process.terminate()
        process.waitUntilExit()
    }
}
