import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import SignetTestSupport

/// Issue 49: operating a repository without stranding it by accident, and messages that name
/// the real mistake.
@Suite("Repository operations (issue 49)")
struct RepositoryOperationsCLITests {
    @Test("a key file others can read is warned about once, even when it is given for two roles")
    func keyWarningOnce() throws {
        let p = try UpdateCLITests.Publisher("ops-warning")
        let exposed = p.work.directory.file("exposed.pem")
        try FileManager.default.copyItem(atPath: p.work.privatePEM, toPath: exposed)
        #expect(chmod(exposed, 0o644) == 0)
        let refreshed = try CLI.run(["repo", "refresh", p.repo, "--snapshot-key", exposed, "--timestamp-key", exposed, "--passphrase-file", p.work.passFile])
        #expect(refreshed.status == 0, "\(refreshed.stderr)")
        let warnings = refreshed.stderr.split(separator: "\n").filter { $0.contains("warning") && $0.contains("exposed.pem") }
        #expect(warnings.count == 1, "\(refreshed.stderr)")
    }
}
