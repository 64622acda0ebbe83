#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import SignetCore
import SignetTUF
import SignetCrypto
import SignetManifest
import SignetPackage

/// A rotation that never strands a release (FORMAT.md §7, "Rotating the targets keys"; issue
/// 61): a listed release whose package no targets key of the root devices trust verifies any
/// more is signed again with one it names — the same name, version, sequence, channels and
/// rollout plan, every resource as it was — and staged in place of the old listing.
extension TUFRepository {
    /// A listed release `root` strands (its package verifies with none of `root`'s targets
    /// keys), and what is done about it.
    public struct StrandedRelease: Sendable {
        public let release: TUFPackageTarget
        /// The staged targets version lists it re-signed with a key `root` names (it waits for
        /// the targets signatures); false: `signet repo resign` has not been run for it yet.
        public let resignedInStaging: Bool
    }

    /// The releases the newest published targets version lists on a channel whose package no
    /// targets key of `root` verifies (read whole, as a device would): once `root` is what
    /// devices trust, those that lack them refuse them — unless they are re-signed.
    func stranded(under root: TUFRoot, now: Timestamp) throws -> [StrandedRelease] {
        guard let (version, bytes) = try latest("targets") else { return [] }
        let keys = (root.roles["targets"]?.keyIDs ?? []).compactMap { root.keys[$0]?.publicKey(source: "targets key \($0.prefix(16))") }
        let targets = try TUFTargets(TUFMetadata(bytes: bytes, expectedType: "targets", name: "\(version).targets.json"))
        let staged =
            try self.staged("targets").flatMap { document -> [String: TUFPackageTarget]? in
                let members = document.signed["targets"]?.objectMembers ?? []
                return Dictionary(
                    members.compactMap { path, value in (try? TUFTarget(path: path, json: value)).flatMap(TUFPackageTarget.init).map { (path, $0) } },
                    uniquingKeysWith: { first, _ in first })
            } ?? [:]
        func verifies(_ package: TUFPackageTarget) -> Bool {
            let file = targetFile("\(package.sha256).\(package.target)")
            return (try? PackageReader.verify(file, policy: TrustPolicy(keys: keys), now: now).isValid) == true
        }
        return targets.targets.values.compactMap(TUFPackageTarget.init).filter { package in
            !package.channels.isEmpty && !package.target.contains("/") && !verifies(package)
        }.sorted { $0.target < $1.target }.map { package in
            let fixed = staged[package.target].map { $0.sha256 != package.sha256 && $0.sequence == package.sequence && verifies($0) } ?? false
            return StrandedRelease(release: package, resignedInStaging: fixed)
        }
    }

    /// A stranded release and what is done about it, for a person.
    public func describeStranded(_ stranded: StrandedRelease, underRoot version: Int64) -> String {
        describe(stranded, underRoot: version)
    }

    func describe(_ stranded: StrandedRelease, underRoot version: Int64) -> String {
        let release = stranded.release
        let what = "\(release.target) (\(release.name) \(release.version), sequence \(release.sequence), channels \(release.channels.joined(separator: ", ")))"
        if stranded.resignedInStaging {
            return "\(what): re-signed in the staged targets (same sequence, every file untouched); its targets key holders sign it"
        }
        return
            "\(what) is signed by no targets key root v\(version) names: devices that lack it would refuse it. Re-sign it (same sequence, every file untouched): `signet repo resign \(path) \(release.target) --key KEY`, KEY a targets key of root v\(version)\(try? staged("root") != nil ? " (once its root key holders have signed it)" : "")"
    }

    /// Releases the staged root would strand (nothing while no root is staged).
    public func strandedByStagedRoot(now: Timestamp = .now) throws -> [StrandedRelease] {
        guard let document = try staged("root"), let root = try? TUFRoot(document.metadata(as: "root", name: "staging/root.json")) else { return [] }
        return try stranded(under: root, now: now)
    }

    /// Stages the next targets version with the release listed as `target` (its file name, or
    /// the package name of the newest listed release) re-signed by `signer` (``/SignetPackage/PackageResigner``):
    /// the same entry — name, version, sequence, channels, rollout plan — bound to the new
    /// package's length, SHA-256 and manifest SHA-256, the package staged in `staging/targets/`
    /// until the targets threshold signs. `signer`'s key must be a targets key of the root
    /// devices will trust: the published root, or a staged one its root key holders have signed
    /// (a rotation's). The package is verified first with the targets keys of any root version
    /// published (the key that packed it may be the one being rotated out).
    ///
    /// An encrypted release (FORMAT.md §8) needs `decryptionKey`, one of its recipients' keys:
    /// the signed package inside it is re-signed and sealed again under the same package key
    /// with the same envelope, so every device that could read it still can.
    public func resign(_ target: String, signer: Signer, decryptionKey: DecryptionKey? = nil, now: Timestamp = .now) throws -> TUFPackageTarget {
        let root = try effectiveRoot()
        let newKeys = (root.roles["targets"]?.keyIDs ?? []).compactMap { root.keys[$0]?.publicKey(source: "targets key \($0.prefix(16))") }
        guard newKeys.contains(where: { $0.keyID == signer.key.keyID }) else {
            let staged = try staged("root") != nil
            throw SignetError(
                .untrustedSigner,
                "key \(signer.key.keyID.short) is not a targets key of root v\(root.metadata.version)\(staged ? ", and the staged root is not signed by its root key holders yet: sign it first (`signet repo sign \(path) --role root`), then re-sign the releases it strands" : ""): devices would refuse a package it signs; nothing was staged",
                path: path)
        }
        var document = try nextTargets(now: now)
        var members = document.signed["targets"]?.objectMembers ?? []
        let listed = members.compactMap { path, value in (try? TUFTarget(path: path, json: value)).flatMap(TUFPackageTarget.init) }
        let release: TUFPackageTarget
        if let exact = listed.first(where: { $0.target == target }) {
            release = exact
        } else if let newest = listed.filter({ Manifest.sameName($0.name, target) && !$0.channels.isEmpty }).max(by: { $0.sequence < $1.sequence }) {
            release = newest
        } else {
            throw SignetError(
                .targetNotFound,
                "the targets metadata lists no release '\(target)' (give a target file name or a package name; it lists: \(listed.map(\.target).sorted().joined(separator: ", ")))",
                path: metadataDirectory)
        }
        // The key that packed it: a targets key of any published root version.
        var oldKeys: [PublicKey] = []
        let names = (try? FileManager.default.contentsOfDirectory(atPath: metadataDirectory)) ?? []
        for name in names where name.hasSuffix(".root.json") {
            guard let bytes = try? readSmallFile("\(metadataDirectory)/\(name)", what: "root metadata", limit: 512_000),
                let metadata = try? TUFMetadata(bytes: bytes, expectedType: "root", name: name), let old = try? TUFRoot(metadata)
            else { continue }
            oldKeys += (old.roles["targets"]?.keyIDs ?? []).compactMap { old.keys[$0]?.publicKey(source: "targets key \($0.prefix(16))") }
        }
        let source = targetFile("\(release.sha256).\(release.target)")
        let folder = stagedTargetsDirectory
        if mkdir(folder, 0o700) != 0 && errno != EEXIST {
            throw SignetError.posix(SystemCallFailure("mkdir", code: errno), "cannot make the folder of staged packages", path: folder)
        }
        let temporary = "\(folder)/.resign-\(getpid())-\(release.target)"
        unlink(temporary)
        defer { unlink(temporary) }
        if EncryptedPackage.isEncrypted(source) {
            guard let decryptionKey else {
                throw SignetError(
                    .notARecipient,
                    "\(release.target) is encrypted: re-signing it re-signs the package inside, so give the key of one of its recipients with --decryption-key; nothing was staged",
                    path: source)
            }
            // The package inside, in the clear only in this owner-only folder while it is re-signed.
            let plain = temporary + ".plain", signed = temporary + ".signed"
            unlink(plain)
            unlink(signed)
            defer {
                unlink(plain)
                unlink(signed)
            }
            try EncryptedPackage.decrypt(source, with: decryptionKey, to: plain)
            _ = try PackageResigner.resign(plain, to: signed, signer: signer, policy: TrustPolicy(keys: oldKeys), replace: true, now: now)
            try EncryptedPackage.seal(signed, like: source, with: decryptionKey, output: temporary, replace: true)
        } else {
            _ = try PackageResigner.resign(source, to: temporary, signer: signer, policy: TrustPolicy(keys: oldKeys), replace: true, now: now)
        }
        let described = try PackageBinding.describing(temporary, decryptionKey: decryptionKey)
        let name = "\(described.sha256).\(release.target)"
        if !FileManager.default.fileExists(atPath: "\(targetsDirectory)/\(name)") {
            guard rename(temporary, "\(folder)/\(name)") == 0 else {
                throw SignetError.posix(SystemCallFailure("rename", code: errno), "cannot stage the re-signed package", path: folder)
            }
            AtomicFile.syncDirectory(folder)
        }
        let entry = TUFPackageTarget(
            target: release.target, name: release.name, version: release.version, sequence: release.sequence,
            manifestSHA256: described.manifestSHA256, channels: release.channels, length: Int64(described.size),
            sha256: described.sha256, rollout: release.rollout)
        let json = TUFJSON.object([
            ("length", .number(String(described.size))), ("hashes", .object([("sha256", .string(described.sha256))])), ("custom", entry.custom)
        ])
        guard let index = members.firstIndex(where: { $0.0 == release.target }) else {
            throw SignetError(.targetNotFound, "the target '\(release.target)' is not listed", path: metadataDirectory)
        }
        members[index].1 = json
        document.set([("targets", .object(members)), ("expires", .string(Self.expiry(now, lifetimes.targets)))])
        try writeStaged("targets", document)
        return entry
    }
}
