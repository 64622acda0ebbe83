import Foundation
import SignetTestSupport

/// The built `signet` binary: beside the test bundle in the build directory, or $SIGNET_BINARY.
enum CLI {
    static let binary: String = {
        if let override = ProcessInfo.processInfo.environment["SIGNET_BINARY"] { return override }
        let testBundle = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var directory = testBundle.deletingLastPathComponent()
        // Under `swift test` the runner is <build>/<Product>PackageTests.xctest; go up until signet is beside us.
        for _ in 0..<4 {
            let candidate = directory.appendingPathComponent("signet").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            directory = directory.deletingLastPathComponent()
        }
        fatalError("cannot find the signet binary near \(testBundle.path); set SIGNET_BINARY")
    }()

    @discardableResult
    static func run(_ arguments: [String], environment: [String: String?] = [:], directory: String? = nil) throws -> ProcessResult {
        try SignetTestSupport.run(binary, arguments, environment: environment, directory: directory)
    }
}

/// A key set made by `signet keygen` in a fresh directory, plus what the openssl CLI makes for
/// the cases signet must refuse.
final class Workspace {
    let directory: TemporaryDirectory
    var path: String { directory.path }
    let passphrase = "correct horse battery staple"
    var passFile: String { directory.file("pass.txt") }
    var keys: String { directory.file("keys") }
    var privatePEM: String { keys + "/private_key.pem" }
    var privateP12: String { keys + "/private_key.p12" }
    var publicDER: String { keys + "/public_key.der" }
    var certificate: String { keys + "/certificate.der" }
    let keyID: String

    init() throws {
        directory = try TemporaryDirectory()
        try directory.write("pass.txt", Data((passphrase + "\n").utf8), mode: 0o600)
        let made = try CLI.run(["keygen", "--out", directory.file("keys"), "--bits", "2048",
                                "--passphrase-file", directory.file("pass.txt"), "--json"])
        guard made.status == 0, let id = try made.json()["key_id"] as? String else {
            throw SupportError("keygen failed: \(made.status) \(made.stderr)")
        }
        keyID = id
    }

    /// Runs openssl in the workspace and fails loudly if it fails.
    @discardableResult
    func openssl(_ arguments: [String]) throws -> ProcessResult {
        let result = try SignetTestSupport.run("openssl", arguments, directory: path)
        guard result.status == 0 else { throw SupportError("openssl \(arguments) failed: \(result.stderr)") }
        return result
    }

    /// A PEM SubjectPublicKeyInfo of the signet key, for `openssl dgst -verify`.
    func publicPEM() throws -> String {
        let out = directory.file("public.pem")
        try openssl(["pkey", "-pubin", "-inform", "DER", "-in", publicDER, "-out", out])
        return out
    }
}
