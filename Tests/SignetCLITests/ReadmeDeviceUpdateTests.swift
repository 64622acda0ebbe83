import Foundation
import Testing
import SignetTestSupport

/// README's "Device updates over HTTPS" walk-through, run as written against a real nginx.
@Suite("README device update walk-through")
struct ReadmeDeviceUpdateTests {
    /// The shell block that follows `<!-- device-update -->` in README.md.
    static func walkThrough() throws -> String {
        let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../README.md").path
        let text = try String(contentsOfFile: readme, encoding: .utf8)
        guard let marker = text.range(of: "<!-- device-update -->\n```sh\n"),
            let end = text.range(of: "\n```", range: marker.upperBound..<text.endIndex)
        else {
            throw SupportError("README.md has no device-update walk-through")
        }
        return String(text[marker.upperBound..<end.lowerBound])
    }

    @Test("publish, seal, pin, download and install, reverify, status: as README says")
    func walkThrough() throws {
        let server = try HTTPSServer.site("ReadmeDeviceUpdateTests")
        let work = try TemporaryDirectory()
        let d = work.path
        let environment: [String: String?] = [
            "PATH": URL(fileURLWithPath: CLI.binary).deletingLastPathComponent().path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            "SIGNET_PASSPHRASE": "device update walk-through"
        ]
        // What the walk-through starts from: a release, a signing key, the server's PKI.
        let setup = """
            set -e
            mkdir -p dist/bin pki
            printf '#!/bin/sh\\necho app 1.4.2\\n' > dist/bin/app && chmod 755 dist/bin/app
            head -c 100000 /dev/urandom > dist/data.bin
            signet keygen --out keys --bits 2048 --passphrase-env SIGNET_PASSPHRASE > /dev/null
            cp '\(server.root)' pki/root.pem
            cp '\(server.intermediate)' pki/intermediate.pem
            openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out pki/backup-key.pem 2>/dev/null
            """
        let prepared = try run("bash", ["-c", setup], environment: environment, directory: d)
        #expect(prepared.status == 0, "\(prepared.stderr)")
        // Places a device has, moved into the temporary directory; the server is this nginx.
        let script = try Self.walkThrough()
            .replacingOccurrences(of: "https://updates.example.com", with: server.base)
            .replacingOccurrences(of: "/srv/www/", with: server.www + "/")
            .replacingOccurrences(of: "/opt/", with: d + "/opt/")
            .replacingOccurrences(of: "/var/lib/", with: d + "/var/lib/")
        let ran = try run("bash", ["-euo", "pipefail", "-c", script], environment: environment, directory: d)
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        #expect(try contents(d + "/opt/app/data.bin") == contents(d + "/dist/data.bin"))
        #expect(ran.stdoutText.contains("from:     \(server.base)/app-1.4.2.zip"), "status names the source: \(ran.stdoutText)")
        // Read in place with range requests (no copy of the package on the device).
        let statuses = try server.statuses(of: "app-1.4.2.zip")
        #expect(!statuses.isEmpty && statuses.allSatisfy { $0 == 206 }, "\(statuses)")

        // The same device with only the backup pin (the server's chain has no such key): refused
        // before anything is written, and the message lists the pins the server presented.
        try FileManager.default.removeItem(atPath: d + "/opt/app")
        try FileManager.default.removeItem(atPath: d + "/app-1.4.2.zip") // a fresh CI job packs again
        let backupOnly = script.replacingOccurrences(of: "--tls-pin $PIN_NOW ", with: "")
        let refused = try run("bash", ["-euo", "pipefail", "-c", backupOnly], environment: environment, directory: d)
        #expect(refused.status == 3, "\(refused.stderr)")
        #expect(refused.stderr.contains(try server.pin(server.intermediate)), "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: d + "/opt/app"))
    }
}
