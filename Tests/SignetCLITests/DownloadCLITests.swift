import Foundation
import Testing
import SignetTestSupport

/// A real nginx on loopback serving HTTPS with a certificate chain made by the openssl CLI:
/// a private root, an intermediate, and a leaf for localhost (only).
final class HTTPSServer {
    let directory: TemporaryDirectory
    let port: Int
    var www: String { directory.file("www") }
    var root: String { directory.file("root.pem") }
    var intermediate: String { directory.file("int.pem") }
    var leaf: String { directory.file("leaf.pem") }
    var otherRoot: String { directory.file("other-root.pem") }
    var accessLog: String { directory.file("access.log") }
    private let process: Process

    func url(_ path: String, host: String = "localhost") -> String { "https://\(host):\(port)/\(path)" }

    /// The `sha256//` pin of a PEM certificate's public key, as the openssl CLI computes it.
    func pin(_ certificate: String) throws -> String {
        let script = "openssl x509 -in '\(certificate)' -pubkey -noout | openssl pkey -pubin -outform DER | openssl dgst -sha256 -binary | base64"
        return "sha256//" + (try run("bash", ["-c", script]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    init() throws {
        directory = try TemporaryDirectory()
        let d = directory.path
        let script = """
        set -e
        cd '\(d)'
        openssl req -x509 -newkey rsa:2048 -nodes -keyout root.key -out root.pem -days 30 -subj "/CN=Signet Test Root" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout other-root.key -out other-root.pem -days 30 -subj "/CN=Other Root" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
        openssl req -newkey rsa:2048 -nodes -keyout int.key -out int.csr -subj "/CN=Signet Test Intermediate"
        printf "basicConstraints=critical,CA:TRUE,pathlen:0\\nkeyUsage=critical,keyCertSign,cRLSign\\n" > int.ext
        openssl x509 -req -in int.csr -CA root.pem -CAkey root.key -CAcreateserial -out int.pem -days 30 -extfile int.ext
        openssl req -newkey rsa:2048 -nodes -keyout leaf.key -out leaf.csr -subj "/CN=localhost"
        printf "subjectAltName=DNS:localhost\\nextendedKeyUsage=serverAuth\\n" > leaf.ext
        openssl x509 -req -in leaf.csr -CA int.pem -CAkey int.key -CAcreateserial -out leaf.pem -days 30 -extfile leaf.ext
        cat leaf.pem int.pem > chain.pem
        mkdir -p www/slow tmp
        """
        let made = try run("bash", ["-c", script])
        guard made.status == 0 else { throw SupportError("making the test CA failed: \(made.stderr)") }
        // A free loopback port: bind to 0 and read what the kernel chose.
        let portText = try run("python3", ["-c", "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"]).stdoutText
        guard let port = Int(portText.trimmingCharacters(in: .whitespacesAndNewlines)) else { throw SupportError("no free port") }
        self.port = port
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
          server {
            listen 127.0.0.1:\(port) ssl;
            server_name localhost;
            ssl_certificate \(d)/chain.pem;
            ssl_certificate_key \(d)/leaf.key;
            root \(d)/www;
            location /slow/ { limit_rate 200k; }
            location = /to-http { return 302 http://localhost:\(port)/app.zip; }
            location = /to-https { return 302 https://localhost:\(port)/app.zip; }
          }
        }
        """
        let configPath = try directory.write("nginx.conf", Data(config.utf8))
        let nginx = FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx") ? "/usr/sbin/nginx" : try which("nginx")
        process = Process()
        process.executableURL = URL(fileURLWithPath: nginx)
        process.arguments = ["-c", configPath, "-p", d, "-e", d + "/error.log"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Ready when it accepts connections.
        for _ in 0..<100 {
            if try run("python3", ["-c", "import socket; socket.create_connection(('127.0.0.1', \(port)), 0.2)"]).status == 0 { return }
            usleep(50_000)
        }
        process.terminate()
        throw SupportError("nginx did not start: \((try? String(contentsOfFile: d + "/error.log", encoding: .utf8)) ?? "")")
    }

    deinit {
        process.terminate()
        process.waitUntilExit()
    }
}

@Suite("Downloads over HTTPS against a real nginx: TLS policy, errors, resume, install", .serialized)
struct DownloadCLITests {
    @Test("TLS policy: system store, --tls-ca, pins anywhere in the chain, --tls-cert, host name")
    func tlsPolicy() throws {
        let server = try HTTPSServer()
        let work = try TemporaryDirectory()
        let body = try contents(try server.directory.writeRandom("www/file.bin", count: 100_000))
        let out = work.file("file.bin")
        func fetch(_ extra: [String], host: String = "localhost") throws -> ProcessResult {
            try CLI.run(["fetch", server.url("file.bin", host: host), "--out", out, "--retries", "0"] + extra)
        }
        // The system store does not know the private root.
        let system = try fetch([])
        #expect(system.status == 3, "\(system.stderr)")
        let leafPin = try server.pin(server.leaf)
        #expect(system.stderr.contains("localhost") && system.stderr.contains(leafPin), "names the host and the presented pins: \(system.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out))
        // Only the given roots.
        #expect(try fetch(["--tls-ca", server.root]).status == 0)
        #expect(try contents(out) == body, "byte-identical")
        #expect(try fetch(["--tls-ca", server.otherRoot]).status == 3)
        // A pin of the leaf, the intermediate or the root passes; an unknown pin fails and the
        // message lists the chain's pins; one good and one unknown pin pass.
        for certificate in [server.leaf, server.intermediate, server.root] {
            let pinned = try fetch(["--tls-ca", server.root, "--tls-pin", try server.pin(certificate)])
            #expect(pinned.status == 0, "\(certificate): \(pinned.stderr)")
        }
        let unknown = "sha256//" + Data(repeating: 7, count: 32).base64EncodedString()
        let refused = try fetch(["--tls-ca", server.root, "--tls-pin", unknown])
        #expect(refused.status == 3)
        for certificate in [server.leaf, server.intermediate, server.root] {
            let pin = try server.pin(certificate)
            #expect(refused.stderr.contains(pin), "lists every pin of the chain: \(refused.stderr)")
        }
        #expect(try fetch(["--tls-ca", server.root, "--tls-pin", unknown, "--tls-pin", try server.pin(server.intermediate)]).status == 0)
        // The exact certificate.
        #expect(try fetch(["--tls-ca", server.root, "--tls-cert", server.leaf]).status == 0)
        #expect(try fetch(["--tls-ca", server.root, "--tls-cert", server.intermediate]).status == 3)
        // The leaf names localhost only: the same server as 127.0.0.1 is the wrong host (3),
        // whatever the pins say.
        let wrongHost = try CLI.run(["fetch", "https://127.0.0.1:\(server.port)/file.bin", "--out", out, "--retries", "0",
                                     "--tls-ca", server.root, "--tls-pin", try server.pin(server.root)])
        #expect(wrongHost.status == 3, "\(wrongHost.stderr)")
    }

    @Test("a sealed --tls-ca directory is checked against its seal: a replaced CA file is refused")
    func sealedRoots() throws {
        let server = try HTTPSServer()
        let work = try TemporaryDirectory()
        _ = try server.directory.writeRandom("www/file.bin", count: 1000)
        let roots = work.file("roots")
        try FileManager.default.createDirectory(atPath: roots, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: server.root, toPath: roots + "/root.pem")
        let salt = try work.write("salt", Data("device salt 1234\n".utf8), mode: 0o600)
        #expect(try CLI.run(["trust", "seal", roots, "--salt-file", salt]).status == 0)
        let fetch = ["fetch", server.url("file.bin"), "--out", work.file("out"), "--retries", "0", "--tls-ca", roots, "--trust-salt-file", salt]
        let sealed = try CLI.run(fetch)
        #expect(sealed.status == 0, "\(sealed.stderr)")
        // An attacker swaps the CA file for their own root: the seal no longer matches.
        try FileManager.default.removeItem(atPath: roots + "/root.pem")
        try FileManager.default.copyItem(atPath: server.otherRoot, toPath: roots + "/root.pem")
        let replaced = try CLI.run(fetch)
        #expect(replaced.status == 3, "\(replaced.stderr)")
        #expect(replaced.stderr.contains("seal"), "\(replaced.stderr)")
    }

    @Test("http:// is refused (2) unless --allow-http, which takes no TLS options; 404 is 5; a redirect to http:// is refused")
    func schemesAndErrors() throws {
        let server = try HTTPSServer()
        let work = try TemporaryDirectory()
        _ = try server.directory.writeRandom("www/app.zip", count: 1000)
        let out = work.file("x")
        let http = try CLI.run(["fetch", "http://localhost:\(server.port)/app.zip", "--out", out])
        #expect(http.status == 2, "\(http.stderr)")
        #expect(try CLI.run(["fetch", "http://localhost:\(server.port)/app.zip", "--out", out, "--allow-http", "--tls-ca", server.root]).status == 2)
        let missing = try CLI.run(["fetch", server.url("absent"), "--out", out, "--tls-ca", server.root, "--json"])
        #expect(missing.status == 5)
        #expect((try missing.json()["error"] as? [String: Any])?["code"] as? String == "network-error")
        #expect(missing.stderr.contains("404"))
        #expect(try CLI.run(["fetch", server.url("to-https"), "--out", out, "--tls-ca", server.root]).status == 0, "https redirects are followed")
        let downgraded = try CLI.run(["fetch", server.url("to-http"), "--out", work.file("y"), "--tls-ca", server.root, "--retries", "0"])
        #expect(downgraded.status == 3, "\(downgraded.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.file("y")))
        // Too large.
        let big = try CLI.run(["fetch", server.url("app.zip"), "--out", work.file("z"), "--tls-ca", server.root, "--max-download-size", "100"])
        #expect(big.status == 4, "\(big.stderr)")
        #expect(!FileManager.default.fileExists(atPath: work.file("z")))
    }

    @Test("unpack URL installs a verified package; a tampered one is refused (1) and DIR stays as it was")
    func unpackURL() throws {
        let server = try HTTPSServer()
        let work = try Workspace()
        let tree = work.directory.file("tree")
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
        _ = try work.directory.writeRandom("tree/data.bin", count: 50_000)
        let package = server.www + "/app.zip"
        let packed = try CLI.run(["pack", tree, "--key", work.privatePEM, "--passphrase-file", work.passFile,
                                  "--name", "app", "--version", "1", "--out", package])
        #expect(packed.status == 0, "\(packed.stderr)")
        let dest = work.directory.file("installed")
        let installed = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root])
        #expect(installed.status == 0, "\(installed.stderr)")
        #expect(try contents(dest + "/data.bin") == contents(tree + "/data.bin"))
        #expect(try run("getfattr", ["-n", "user.signet.sig", dest + "/data.bin"]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: work.directory.file(".installed.signet-download")), "the download is removed")
        // Flip one byte of the served package: refused, DIR unchanged.
        var bytes = try contents(package)
        bytes[bytes.count / 3] ^= 0x55
        try bytes.write(to: URL(fileURLWithPath: package))
        let before = try contents(dest + "/data.bin")
        let tampered = try CLI.run(["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root])
        #expect(tampered.status == 1 || tampered.status == 4, "\(tampered.stderr)")
        #expect(try contents(dest + "/data.bin") == before)
        #expect(!FileManager.default.fileExists(atPath: work.directory.file(".installed.signet-download")), "a complete bad download is removed")
        // inspect URL verifies the same way.
        #expect(try CLI.run(["inspect", server.url("app.zip"), "--pubkey", work.publicDER, "--tls-ca", server.root]).status != 0)
    }

    @Test("a download killed mid-way continues on the next run (206 in nginx's log) and is byte-identical")
    func resume() throws {
        let server = try HTTPSServer()
        let work = try TemporaryDirectory()
        let body = try contents(try server.directory.writeRandom("www/slow/big.bin", count: 3_000_000))
        let out = work.file("big.bin")
        // nginx sends 200 KiB/s here: kill -9 after about a second.
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CLI.binary)
        process.arguments = ["fetch", server.url("slow/big.bin"), "--out", out, "--tls-ca", server.root]
        process.standardError = FileHandle.nullDevice
        try process.run()
        usleep(1_500_000)
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        let partial = work.file(".big.bin.signet-download")
        let kept = (try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int) ?? 0
        #expect(kept > 0 && kept < body.count, "a partial download is on disk: \(kept) bytes")
        #expect(!FileManager.default.fileExists(atPath: out), "never reported complete")
        let resumed = try CLI.run(["fetch", server.url("slow/big.bin"), "--out", out, "--tls-ca", server.root, "--json"])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        let resumedFrom = try resumed.json()["resumed_from"] as? Int ?? 0
        #expect(resumedFrom > 0)
        #expect(try contents(out) == body)
        let log = try String(contentsOfFile: server.accessLog, encoding: .utf8)
        #expect(log.contains("\" 206 "), "nginx answered the range request: \(log)")
    }

    @Test("fetch --signature verifies as it downloads; a bad signature leaves no file")
    func fetchSignature() throws {
        let server = try HTTPSServer()
        let work = try Workspace()
        let file = try server.directory.writeRandom("www/fw.bin", count: 200_000)
        #expect(try CLI.run(["sign", file, "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        let out = work.directory.file("fw.bin")
        let good = try CLI.run(["fetch", server.url("fw.bin"), "--out", out, "--signature", server.url("fw.bin.sig"),
                                "--pubkey", work.publicDER, "--tls-ca", server.root])
        #expect(good.status == 0, "\(good.stderr)")
        #expect(try run("getfattr", ["-n", "user.signet.sig", out]).status == 0)
        #expect(try CLI.run(["reverify", out, "--pubkey", work.publicDER]).status == 0)
        try FileManager.default.removeItem(atPath: out)
        try Data(repeating: 1, count: 10).write(to: URL(fileURLWithPath: file), options: .atomic)
        let bad = try CLI.run(["fetch", server.url("fw.bin"), "--out", out, "--signature", server.url("fw.bin.sig"),
                               "--pubkey", work.publicDER, "--tls-ca", server.root])
        #expect(bad.status == 1, "\(bad.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out))
    }
}
