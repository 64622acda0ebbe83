import SignetCore
import SignetCrypto

/// The TUF trust source's rule for one manifest, where both install and re-verify reach it (the
/// listings are added by the TUF layer, `addTUFMetadata`).
extension TrustPolicy {
    /// Why a package signed by `signer` with this manifest is refused by the TUF trust source,
    /// or nil: a key trusted only through TUF metadata vouches only for the packages its role
    /// lists with their manifest's SHA-256.
    package func tufRefusal(signer: KeyID, manifestBytes: [UInt8], manifest: Manifest) -> String? {
        guard tufOnlyKeys.contains(signer) else { return nil }
        let digest = (try? Digest.compute(manifestBytes, algorithm: .sha256).hex) ?? ""
        let roles = tufListings.filter { $0.keyIDs.contains(signer) }
        let listed = tufListings.filter { $0.keyIDs.contains(signer) && $0.manifestSHA256 == digest && Manifest.sameName($0.name, manifest.name) }
        if !listed.isEmpty {
            // A halted release is vouched for by no path, as `update` installs it on no device
            // that lacks it (FORMAT §7).
            guard allowHaltedReleases || listed.contains(where: { !$0.halted }) else {
                return
                    "\(manifest.name) sequence \(manifest.sequence) is listed by the TUF metadata in '\(tufSource ?? "")', but its publisher halted its rollout: it is offered to no device, and no path installs or vouches for it (--allow-halted-release accepts it anyway: dangerous, the release was stopped for a reason)"
            }
            return nil
        }
        let role = roles.first.map { "a key of role '\($0.role)' (\($0.threshold) of \($0.roleKeys) keys)" } ?? "a TUF key"
        return
            "\(manifest.name) sequence \(manifest.sequence) (manifest SHA-256 \(digest.prefix(16))…) is signed by \(role), but no role of the TUF metadata in '\(tufSource ?? "")' lists it: a package is trusted there only when the metadata its role's threshold signed lists its manifest, so one key cannot vouch for a package alone"
    }
}

extension TrustPolicy {
    /// The keys besides `signer` whose signature an unchanged installed file may keep in a tree
    /// of this manifest (FORMAT.md §3, "Files shared across keys"): the keys this
    /// policy accepts, not revoked and of the required channel; when `signer` is trusted only
    /// through TUF metadata, only the keys of the role whose metadata lists this manifest (the
    /// same role: a key of another role never vouches for this package's files). The file's
    /// content is still what the manifest `signer` signed lists; the other key's signature says
    /// only which trusted release wrote the bytes.
    package func peerKeys(of signer: KeyID, manifestBytes: [UInt8], manifest: Manifest) -> [PublicKey] {
        let allowed: Set<KeyID>
        if tufOnlyKeys.contains(signer) {
            let digest = (try? Digest.compute(manifestBytes, algorithm: .sha256).hex) ?? ""
            allowed = tufListings.filter { $0.keyIDs.contains(signer) && $0.manifestSHA256 == digest && Manifest.sameName($0.name, manifest.name) }
                .reduce(into: Set<KeyID>()) { $0.formUnion($1.keyIDs) }
        } else {
            allowed = Set(keys.lazy.map(\.keyID).filter { !tufOnlyKeys.contains($0) })
        }
        return keys.filter { $0.keyID != signer && allowed.contains($0.keyID) && refusal(for: $0.keyID) == nil }
    }
}
