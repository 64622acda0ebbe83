import Foundation
import Signet   // not @testable: the README's start-up example uses the public API alone
import SignetTestSupport
import Testing

/// README "An app can check its own resources at start-up": the same code, with paths and a log
/// function supplied here, must compile and answer true, then false once a resource changes.
@Suite("README start-up check example")
struct ReadmeStartupExampleTests {
    final class Log: @unchecked Sendable { var lines: [String] = [] }

    static func checkResources(_ tree: String, key: String, log: @escaping (String) -> Void) async -> Bool {
        do {
            let policy = try TrustPolicy(publicKeyFiles: [key])
            var options = ReverifyOptions()
            options.exclude = ["cache", "*.log"]
            let report = try await Reverifier.verifyTree(at: tree, policy: policy, options: options)
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

    @Test("true for an intact tree, false (and logged) once a file changes")
    func example() async throws {
        let directory = try TemporaryDirectory()
        let tree = try ReverifyTests.installed(directory)
        let log = Log()
        #expect(await Self.checkResources(tree, key: Fixtures.key("rsa2048-spki.der")) { log.lines.append($0) })
        try Data("app.log is allowed to change".utf8).write(to: URL(fileURLWithPath: tree + "/app.log"))
        #expect(await Self.checkResources(tree, key: Fixtures.key("rsa2048-spki.der")) { log.lines.append($0) })
        try Data("changed".utf8).write(to: URL(fileURLWithPath: tree + "/readme.txt"))
        #expect(await !Self.checkResources(tree, key: Fixtures.key("rsa2048-spki.der")) { log.lines.append($0) })
        #expect(log.lines == ["resource check: modified readme.txt: 'readme.txt' differs from the signed manifest (7 bytes, not 65000)"])
    }
}
