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
    /// What the check established.
    package struct Outcome: Sendable {
        package let checkpoint: Checkpoint
        package let index: UInt64
        /// Tiles read to prove the checkpoint extends the stored one.
        package let tilesFetched: Int
    }

    package static func check(
        _ release: TUFPackageTarget, packageURL: String, logURL: String, policy: TransparencyPolicy, client: TUFClient
    ) throws -> Outcome {
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
        let (checkpoint, log) = try proof.verify(leaf: try release.logLeafHash(), policy: policy)
        var tiles = 0
        if let storedNote = try client.storedCheckpoint(origin: checkpoint.origin) {
            let stored: Checkpoint
            do {
                stored = try Checkpoint(text: try SignedNote.open(storedNote, known: [log]).text)
            } catch let error as SignetError {
                // A stored checkpoint the log's key no longer opens: a rotated log key. The
                // device keeps its old view and refuses rather than start again.
                throw refuse("the checkpoint this device holds for \(checkpoint.origin) does not open with the policy's log key (\(error.reason))")
            }
            if checkpoint.size < stored.size {
                throw refuse("its proof's checkpoint (\(checkpoint.size) entries) is older than the one this device holds (\(stored.size))")
            } else if checkpoint.size == stored.size {
                guard checkpoint.rootHash == stored.rootHash else {
                    throw refuse("the log shows two trees of \(stored.size) entries (a fork): its proof's checkpoint is not the one this device holds")
                }
            } else {
                guard checkpoint.size <= UInt64(Int.max) else { throw refuse("the log's size is beyond what this device reads") }
                let base = logURL.hasSuffix("/") ? logURL : logURL + "/"
                var tiled = TiledLog(size: Int(checkpoint.size)) { path in
                    try client.fetchLogFile(base + path, limit: TileTree.width * 32, what: "the log's tile \(path)")
                }
                let consistency: [[UInt8]]
                do {
                    consistency = try tiled.consistencyProof(old: Int(stored.size))
                } catch let error as SignetError {
                    throw refuse("cannot read the log's tiles to check its checkpoint extends the one this device holds: \(error.reason)")
                }
                tiles = tiled.fetched
                guard
                    TileTree.verifyConsistency(
                        old: Int(stored.size), new: Int(checkpoint.size), oldRoot: stored.rootHash, newRoot: checkpoint.rootHash, proof: consistency)
                else {
                    throw refuse(
                        "the log's checkpoint of \(checkpoint.size) entries does not extend the one of \(stored.size) this device holds (the log was rewritten, or its tiles are not its own)"
                    )
                }
                try client.storeCheckpoint(origin: checkpoint.origin, note: proof.checkpoint)
            }
        } else {
            try client.storeCheckpoint(origin: checkpoint.origin, note: proof.checkpoint)
        }
        return Outcome(checkpoint: checkpoint, index: proof.index, tilesFetched: tiles)
    }
}
