import Foundation
import SignetCore
import SignetCrypto
import SignetTUF

/// The device's transparency check (FORMAT.md §10): before anything of a release is fetched,
/// its proof (beside the package: `PACKAGE.tlog-proof`) must show the release's entry — rebuilt
/// from the target the TUF roles signed — in a checkpoint its policy's log signed and its
/// witnesses' quorum cosigned; and that checkpoint must extend the largest one this device
/// holds for the log (a consistency proof built from the log's tiles). Every refusal is
/// `.notLogged` (exit 3).
package enum TransparencyCheck {
    package static func check(
        _ release: TUFPackageTarget, packageURL: String, logURL: String, policy: TransparencyPolicy, client: TUFClient
    ) throws -> TransparencyVerifier.Outcome {
        func refuse(_ why: String) -> SignetError {
            SignetError(
                .notLogged, "\(release.name) \(release.version) (sequence \(release.sequence)) is not installed: \(why). Nothing of it was fetched",
                path: release.target)
        }
        let proofURL = packageURL + ".tlog-proof"
        guard let bytes = try client.fetchLogFile(proofURL, limit: TransparencyProof.largest, what: "the release's log proof") else {
            throw refuse("the repository has no log proof for it (\(proofURL))")
        }
        let proof: TransparencyProof
        do {
            proof = try TransparencyProof(bytes)
        } catch let error as SignetError {
            throw refuse(error.reason)
        }
        let base = logURL.hasSuffix("/") ? logURL : logURL + "/"
        let verifier = TransparencyVerifier(
            policy: policy, storedCheckpoint: { try client.storedCheckpoint(origin: $0) }, store: { try client.storeCheckpoint(origin: $0, note: $1) },
            tile: { try client.fetchLogFile(base + $0, limit: TileTree.width * 32, what: "the log's tile \($0)") })
        return try verifier.check(proof, leaf: try release.logLeafHash(), refuse: refuse)
    }
}
