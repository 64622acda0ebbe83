// An app that only re-verifies what Signet installed, in a package of its own: it depends on the
// `SignetReverify` product alone, so it links neither libzip nor libcurl
// (scripts/example-app.sh builds it and checks its `ldd`).
//
//   reverify-app PUBKEY DIR    re-verifies the tree DIR against its manifest
//
// Prints one line per file that is not ok and a summary; exits 0 when the tree verifies, 1 when
// it does not, 2 for a usage or environment error.
import Foundation
import SignetReverify

let arguments = CommandLine.arguments
guard arguments.count == 3 else {
    FileHandle.standardError.write(Data("usage: reverify-app PUBKEY DIR\n".utf8))
    exit(2)
}
do {
    let policy = try TrustPolicy(publicKeyFiles: [arguments[1]])
    let report = try Reverifier.verifyTree(at: arguments[2], policy: policy)
    if let failure = report.manifestFailure {
        print("manifest: \(failure) \(report.manifestMessage ?? "")")
    }
    for file in report.files where !file.verdict.isOK {
        print("\(file.verdict) \(file.path)")
    }
    print("\(report.files.count) files, \(report.isOK ? "ok" : "NOT ok")")
    exit(report.isOK ? 0 : 1)
} catch {
    FileHandle.standardError.write(Data("reverify-app: \(error)\n".utf8))
    exit(2)
}
