import Foundation
import SignetCore
import SignetCrypto

/// TUF metadata as a trust source of a ``/SignetCrypto/TrustPolicy``: added here, in the TUF layer, so that
/// the policy itself (crypto) knows nothing of TUF's documents.
extension TrustPolicy {
    /// Adds a TUF repository's trusted metadata (`metadataDirectory`, as ``TUFClient`` keeps it)
    /// as a trust source that keeps its thresholds: a package signed by a key of a targets role
    /// (top-level or delegated) is accepted only when its manifest's SHA-256 is listed by that
    /// role, whose metadata its threshold signed (delegation paths and the package name rule
    /// apply: FORMAT.md §7). One key of a role alone vouches for nothing. Nothing is fetched:
    /// the stored root must be signed by its own threshold, the stored targets by the root's
    /// targets threshold, each delegated role by its delegator's. Keys also given by another
    /// source (`--pubkey`, a trust directory) are not restricted.
    public mutating func addTUFMetadata(_ metadataDirectory: String) throws {
        let listings = try TUFPackageListing.stored(in: metadataDirectory)
        guard !listings.isEmpty else {
            throw SignetError(
                .untrustedSigner,
                "the TUF metadata in '\(metadataDirectory)' lists no Signet package (a target with custom.signet): nothing there can vouch for a package",
                path: metadataDirectory)
        }
        for listing in listings {
            var ids: Set<KeyID> = []
            for key in listing.keys.compactMap({ $0.publicKey(source: "TUF role \(listing.role)") }) {
                ids.insert(key.keyID)
                if !keys.contains(where: { $0.keyID == key.keyID }) {
                    keys.append(key)
                    tufOnlyKeys.insert(key.keyID)
                }
            }
            var listed = TUFListed(
                name: listing.release.name, sequence: listing.release.sequence, manifestSHA256: listing.release.manifestSHA256,
                keyIDs: ids, role: listing.role, threshold: listing.threshold, roleKeys: listing.keys.count)
            listed.halted = listing.release.rollout?.state == .halted
            tufListings.append(listed)
        }
        tufSource = metadataDirectory
    }
}
