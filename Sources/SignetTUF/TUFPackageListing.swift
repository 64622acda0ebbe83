#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import SignetCore
import SignetCrypto

/// A Signet package that a trusted TUF targets role lists: its target, the role and the keys
/// that may sign it (FORMAT.md §7, "Package names").
///
/// A package name belongs to the role trusted for it:
/// - the top-level `targets` role may list any name;
/// - a delegated role may list a package only under a target path whose file name is the name
///   or begins with it and `-`, `_` or `.` (`app-1.4.2.zip` for `app`), so that the
///   delegation's `paths` govern the names it may publish (`community/tool-*` gives `tool`);
/// - a name belongs to the first role, in the order the walk reaches them (the top-level
///   targets role first, then its delegations breadth first, in their order), that lists a
///   package of that name: any later role's listing of it is ignored.
package struct TUFPackageListing: Sendable {
    package let release: TUFPackageTarget
    package let target: TUFTarget
    /// The keys of the role that lists it (a package it lists is signed with one of them).
    package let keys: [TUFKey]
    package let role: String
    /// The role's threshold: what signed the listing.
    package let threshold: Int

    /// Whether a delegated role may list a package named `name` under `path`.
    static func nameFits(_ name: String, path: String, role: String) -> Bool {
        if role == "targets" { return true }
        let fileName = Array((path.split(separator: "/", omittingEmptySubsequences: false).last.map(String.init) ?? path).utf8)
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, fileName.starts(with: bytes) else { return false }
        guard fileName.count > bytes.count else { return true }
        return [UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: ".")].contains(fileName[bytes.count])
    }

    /// `listings` in walk order, kept where the name rule allows them: each name to the first
    /// role that lists it.
    static func owned(_ listings: [TUFPackageListing]) -> [TUFPackageListing] {
        var owners: [[UInt8]: String] = [:]
        var kept: [TUFPackageListing] = []
        for listing in listings where nameFits(listing.release.name, path: listing.target.path, role: listing.role) {
            let name = Array(listing.release.name.utf8)
            if let owner = owners[name], owner != listing.role { continue }
            owners[name] = listing.role
            kept.append(listing)
        }
        return kept
    }

    /// The packages the metadata folder's stored roles list, read without any request (the
    /// offline trust source `--tuf-metadata`): the stored root must be signed by its own
    /// threshold, `targets.json` by the root's targets threshold, and each stored delegated role
    /// the walk reaches by its delegator's threshold for it; a delegated target must match the
    /// path rules of every delegation on its way. A delegated role that is not stored, or does
    /// not verify, lists nothing (it conveys no trust). Expiry and the snapshot are not checked:
    /// this is what the device verified when it last refreshed.
    static func stored(in metadataDirectory: String, maximumRoles: Int = 32) throws -> [TUFPackageListing] {
        try TrustedInput.check(metadataDirectory, what: "--tuf-metadata")
        guard let rootBytes = try TUFClient.readStored("root.json", in: metadataDirectory, limit: 512_000) else {
            throw SignetError(
                .fileNotFound,
                "the TUF metadata folder '\(metadataDirectory)' has no root.json: check the path (signet tuf init puts the repository's root there)",
                path: metadataDirectory)
        }
        let root = try TUFTrustedSet(root: rootBytes, now: .now).root
        guard let bytes = try TUFClient.readStored("targets.json", in: metadataDirectory, limit: 5_000_000) else {
            throw SignetError(
                .fileNotFound,
                "the TUF metadata folder '\(metadataDirectory)' has no targets.json yet: the device refreshes it with `signet update --repository` (or `signet tuf refresh`) before it can vouch for packages",
                path: metadataDirectory)
        }
        let metadata = try TUFMetadata(bytes: bytes, expectedType: "targets", name: "targets.json")
        try root.verify(metadata, as: "targets", name: "the stored targets.json")
        let top = try TUFTargets(metadata)
        let topRole = root.roles["targets"]!
        // The stored snapshot (verified when it was fetched; its signature checked again) says
        // when each role's version was published: plans counting from their publication count
        // from then, as they did for the refresh (FORMAT.md §7, "Rollouts").
        let snapshot = (try? TUFClient.readStored("snapshot.json", in: metadataDirectory, limit: 5_000_000)).flatMap { $0 }
            .flatMap { try? TUFMetadata(bytes: $0, expectedType: "snapshot", name: "snapshot.json") }
            .flatMap { metadata in (try? root.verify(metadata, as: "snapshot", name: "the stored snapshot.json")).flatMap { try? TUFSnapshot(metadata) } }
        var listings: [TUFPackageListing] = []
        func list(_ targets: TUFTargets, role: String, keys: [TUFKey], threshold: Int, allows: (String) -> Bool) {
            let published = snapshot?.meta["\(role).json"].flatMap { $0.version == targets.metadata.version ? $0.published : nil }
            for path in targets.targets.keys.sorted() {
                guard let target = targets.targets[path], allows(path), let release = TUFPackageTarget(target) else { continue }
                listings.append(
                    TUFPackageListing(release: release.resolvingRollout(publishedAt: published), target: target, keys: keys, role: role, threshold: threshold))
            }
        }
        list(top, role: "targets", keys: topRole.keyIDs.compactMap { root.keys[$0] }, threshold: topRole.threshold, allows: { _ in true })
        // Breadth first: each role with its delegator and the path rule of the way to it.
        var queue: [(delegator: TUFTargets, name: String, allows: @Sendable (String) -> Bool)] = []
        func enqueue(_ delegator: TUFTargets, above: @escaping @Sendable (String) -> Bool) {
            for role in delegator.delegatedRoles {
                queue.append((delegator, role.name, { above($0) && role.matches($0) }))
            }
            if let succinct = delegator.succinct {
                let names = ((try? FileManager.default.contentsOfDirectory(atPath: metadataDirectory)) ?? []).sorted().compactMap { file -> String? in
                    guard file.hasSuffix(".json"), let name = String(file.dropLast(5)).removingPercentEncoding, succinct.contains(name) else { return nil }
                    return name
                }
                for name in names { queue.append((delegator, name, { above($0) && succinct.role(for: $0) == name })) }
            }
        }
        enqueue(top, above: { _ in true })
        var visited = 0
        while !queue.isEmpty, visited < maximumRoles {
            let next = queue.removeFirst()
            visited += 1
            guard let (keys, role) = next.delegator.delegation(to: next.name),
                let bytes = try TUFClient.readStored(TUFClient.quoted(next.name) + ".json", in: metadataDirectory, limit: 5_000_000),
                let metadata = try? TUFMetadata(bytes: bytes, expectedType: "targets", name: next.name + ".json"),
                (try? next.delegator.verify(metadata, as: next.name, name: next.name + ".json")) != nil,
                let targets = try? TUFTargets(metadata)
            else { continue }
            list(targets, role: next.name, keys: role.keyIDs.compactMap { keys[$0] }, threshold: role.threshold, allows: next.allows)
            enqueue(targets, above: next.allows)
        }
        return owned(listings)
    }
}
