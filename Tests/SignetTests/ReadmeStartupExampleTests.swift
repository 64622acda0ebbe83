import Foundation
import Signet // not @testable: the README's start-up example uses the public API alone
import SignetTestSupport
import SignetCryptoTestSupport
import Testing

/// README "Checking an app's resources at start-up": the same code, with paths and a log
/// function supplied here, must compile and answer true, true with an allowed key changed (and
/// log it), then false once a protected key or a resource changes.
@Suite("README start-up check example")
struct ReadmeStartupExampleTests {
    final class Log: @unchecked Sendable { var lines: [String] = [] }

    static func checkResources(_ tree: String, key: String, rulesFile: String, log: @escaping (String) -> Void) async -> Bool {
        do {
            let policy = try TrustPolicy(publicKeyFiles: [key])
            // exclude, only and allow_keys, as `signet reverify --rules` reads them
            let rules = try ReverifyOptions(rulesFile: rulesFile)
            let report = try await Reverifier.verifyTreeAsync(at: tree, policy: policy, options: rules)
            for file in report.files where file.verdict.isOK && !file.changedKeys.isEmpty {
                log("resource check: \(file.path): allowed keys changed: \(file.changedKeys.map(\.path))")
            }
            guard report.isOK else {
                for file in report.files where !file.verdict.isOK {
                    log("resource check: \(file.verdict) \(file.path): \(file.detail)")
                }
                if let failure = report.manifestFailure { log("resource check: \(failure): \(report.manifestMessage ?? "")") }
                return false
            }
            return true
        } catch {
            log("resource check failed: \(error)")
            return false
        }
    }

    @Test("true for an intact tree and for allowed keys (logged), false (and logged) once anything else changes")
    func example() async throws {
        let directory = try TemporaryDirectory()
        let dist = directory.file("dist")
        try FileManager.default.createDirectory(atPath: dist + "/config", withIntermediateDirectories: true)
        try Data(#"{"serial": "0000", "server": {"url": "https://a.example", "retries": 3}}"#.utf8).write(
            to: URL(fileURLWithPath: dist + "/config/device.json"))
        try Data("read me\n".utf8).write(to: URL(fileURLWithPath: dist + "/readme.txt"))
        var options = PackOptions(name: "myapp", version: "2.1.0", sequence: 1)
        options.structured = ["config/*.json"]
        let key = try PrivateKey(contentsOf: Fixtures.key("rsa2048-pkcs8.pem"))
        _ = try PackageBuilder.pack([dist], to: directory.file("myapp.zip"), signer: Signer(key: key), options: options)
        let tree = directory.file("resources")
        let publicKey = Fixtures.key("rsa2048-spki.der")
        _ = try Installer.install(directory.file("myapp.zip"), to: tree, policy: try TrustPolicy(publicKeyFiles: [publicKey]))
        let rulesFile = try directory.write(
            "reverify-rules.json",
            Data(
                """
                {"exclude": ["cache", "*.log"], "allow_keys": {"config/device.json": ["serial", "server.url"]}}
                """.utf8))

        let log = Log()
        #expect(await Self.checkResources(tree, key: publicKey, rulesFile: rulesFile) { log.lines.append($0) })
        try Data("app.log is allowed to change".utf8).write(to: URL(fileURLWithPath: tree + "/app.log"))
        try Data(#"{"serial": "A17", "server": {"url": "https://b.example", "retries": 3}}"#.utf8).write(to: URL(fileURLWithPath: tree + "/config/device.json"))
        #expect(await Self.checkResources(tree, key: publicKey, rulesFile: rulesFile) { log.lines.append($0) })
        #expect(log.lines == [#"resource check: config/device.json: allowed keys changed: [serial, server.url]"#])

        log.lines = []
        try Data(#"{"serial": "A17", "server": {"url": "https://b.example", "retries": 0}}"#.utf8).write(to: URL(fileURLWithPath: tree + "/config/device.json"))
        try Data("changed".utf8).write(to: URL(fileURLWithPath: tree + "/readme.txt"))
        #expect(await !Self.checkResources(tree, key: publicKey, rulesFile: rulesFile) { log.lines.append($0) })
        #expect(
            log.lines == [
                "resource check: modified config/device.json: 'config/device.json' differs from the signed manifest; keys changed: server.retries (changed)",
                "resource check: modified readme.txt: 'readme.txt' differs from the signed manifest (7 bytes, not 8)"
            ])
    }
}
