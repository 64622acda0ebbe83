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

extension TUFRepository {
    // MARK: Rotation (a new root version)

    /// Stages the next root version with `role`'s keys changed: `add` keys added, keys whose ids
    /// start with any of `remove` (and the keys `removeKeys`) removed, the threshold set when given. Its root key holders
    /// then sign it (those of the current root too, for a root rotation: both thresholds).
    /// Revoking a compromised key is removing it: devices refuse its signatures from the new
    /// root on, however many versions they were behind.
    public func rotate(_ role: String, add: [PublicKey], remove: [String], removeKeys: [PublicKey] = [], threshold: Int?, now: Timestamp = .now) throws -> Int64
    {
        guard TUFMetadata.topLevelRoles.contains(role) else { throw SignetError(.usage, "the roles are root, targets, snapshot and timestamp, not '\(role)'") }
        var document: TUFDocument
        if let staged = try staged("root") {
            document = staged
            document.signatures = []
        } else {
            let root = try publishedRoot()
            document = try TUFDocument(bytes: try latest("root")?.bytes ?? [], name: "\(root.metadata.version).root.json")
            document.signatures = []
            let (next, overflow) = root.metadata.version.addingReportingOverflow(1)
            guard !overflow else { throw SignetError(.usage, "the root role is at the highest version there is") }
            document.set([("version", .number(String(next)))])
        }
        let current = try TUFRoot(TUFMetadata(bytes: document.bytes, expectedType: "root", name: "staging/root.json"))
        var ids = current.roles[role]?.keyIDs ?? []
        var keys = document.signed["keys"]?.objectMembers ?? []
        for key in removeKeys {
            let id = try TUFPublicKeyEntry(key).keyID
            guard ids.contains(id) else {
                throw SignetError(.usage, "\(key.source) is not a \(role) key (its TUF key id is \(id.prefix(16))); see `signet repo status`")
            }
            ids.removeAll { $0 == id }
        }
        for prefix in remove {
            // A key's Signet id (what keygen, key show and pack print) or its TUF key id.
            let text = prefix.lowercased()
            let matching = ids.filter { $0.hasPrefix(text) || (current.keys[$0]?.publicKey(source: role)?.keyID.hex.hasPrefix(text) ?? false) }
            guard !text.isEmpty, matching.count == 1 else {
                throw SignetError(
                    .usage,
                    matching.isEmpty
                        ? "no \(role) key has a Signet or TUF key id starting with '\(prefix)' (`signet repo status` lists both)"
                        : "'\(prefix)' matches \(matching.count) \(role) keys: give more of the id")
            }
            ids.removeAll { $0 == matching[0] }
        }
        for key in add {
            let entry = try TUFPublicKeyEntry(key)
            if !ids.contains(entry.keyID) { ids.append(entry.keyID) }
            if !keys.contains(where: { $0.0 == entry.keyID }) { keys.append((entry.keyID, entry.json)) }
        }
        let newThreshold = threshold ?? current.roles[role]?.threshold ?? 1
        try Self.checkThreshold(newThreshold, keys: ids.count, role: role)
        // A root that changes nothing would cost every key holder a signature for nothing.
        if ids == current.roles[role]?.keyIDs, newThreshold == current.roles[role]?.threshold {
            throw SignetError(
                .usage,
                "nothing changes: the \(role) role is already \(newThreshold) of \(ids.count) with these keys. To extend root's expiry, `signet repo renew \(path) --role root`"
            )
        }
        var roles = document.signed["roles"]?.objectMembers ?? []
        if let index = roles.firstIndex(where: { $0.0 == role }) { roles[index].1 = Self.roleJSON(ids, threshold: newThreshold) }
        // Keys no role names any more leave the root.
        let used = Set(roles.flatMap { $0.1["keyids"]?.arrayItems?.compactMap(\.stringValue) ?? [] })
        keys.removeAll { !used.contains($0.0) }
        document.set([("keys", .object(keys)), ("roles", .object(roles)), ("expires", .string(Self.expiry(now, lifetimes.root)))])
        try writeStaged("root", document)
        // Targets the new root would not accept is staged again now, so its key holders can
        // review and sign it while the root is signed (the root is held until they have).
        if let new = try? TUFRoot(document.metadata(as: "root", name: "staging/root.json")), rolesFailing(under: new).contains("targets") {
            try restageTargets(now: now)
        }
        return document.version
    }
}
