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
        flushLog()
        return try HTTPSServer.answers(inLog: accessLog, of: path, from: offset)
    }

    public var accessLogSize: Int {
        flushLog()
        return (try? FileManager.default.attributesOfItem(atPath: accessLog)[.size] as? Int) ?? 0
    }

    /// lighttpd keeps access log lines in a buffer for a few seconds; SIGHUP (its log rotation)
    /// writes them out. Apache writes each line as its answer ends.
    private func flushLog() {
        guard kind == .lighttpd else { return }
        let before = (try? FileManager.default.attributesOfItem(atPath: accessLog)[.size] as? Int) ?? 0
        kill(process.processIdentifier, SIGHUP)
        for _ in 0..<20 {
            usleep(10_000)
            if ((try? FileManager.default.attributesOfItem(atPath: accessLog)[.size] as? Int) ?? 0) != before { break }
        }
    }

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
                  MaxRanges none
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
                # lighttpd's default stat cache keeps a file's stat for a second (a package replaced
                # within it is served stale); without a cache it sends no ETag nor Last-Modified, so
                # no range request could be pinned to one file. inotify drops an entry on a change.
                server.stat-cache-engine = "inotify"
                # A file of no known type is served with no ETag nor Last-Modified (lighttpd's
                # "allow_caching = 0"): a type for everything, as a real mirror's mime map gives.
                mimetype.assign = ("" => "application/octet-stream")
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
        // The test runner blocks most signals, and a child inherits that mask: Apache and
        // lighttpd (unlike nginx) keep it, and then ignore the SIGTERM that stops them at exit.
        // Started through python3 with every signal unblocked.
        let server = process.executableURL!.path
        process.executableURL = URL(fileURLWithPath: try which("python3"))
        process.arguments =
            [
                "-c", "import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); os.execv(sys.argv[1], sys.argv[1:])",
                server
            ] + (process.arguments ?? [])
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        self.process = process
        ExitCleanup.stopAtExit(process.processIdentifier)
        if try awaitListening(port) { return }
        process.terminate()
        throw SupportError("\(kind) did not start: \((try? String(contentsOfFile: d + "/error.log", encoding: .utf8)) ?? "")")
    }

    deinit {
        ExitCleanup.forget(process.processIdentifier)
        process.terminate()
        process.waitUntilExit()
    }
}
