import SignetCore
import SignetTUF

/// When a targets version reached devices, and the rollout plans that count from it
/// (FORMAT.md §7, "Rollouts": a plan whose start was not given counts from its publication).
extension TUFRepository {
    /// When devices could first see targets version `version`: the time the published snapshot
    /// states for it (``TUFMetaFile/published``). Nil while the snapshot names another version
    /// (signed, not yet refreshed) or states none.
    func publishedTime(ofTargets version: Int64) -> Timestamp? {
        guard let (snapshotVersion, bytes) = try? latest("snapshot"),
            let snapshot = try? TUFSnapshot(TUFMetadata(bytes: bytes, expectedType: "snapshot", name: "\(snapshotVersion).snapshot.json")),
            let named = snapshot.meta["targets.json"], named.version == version
        else { return nil }
        return named.published
    }

    /// `document` (the published targets version `version`, about to become the next one) with
    /// each plan that counted from its publication resolved against when it was published: its
    /// start fixed, `staged_at` gone. Resolved once, when the next version is made, so that a
    /// later publication never moves a plan devices already count from. A version not yet
    /// published keeps its plans as they are.
    func resolvingPublishedPlans(_ document: TUFDocument, version: Int64) -> TUFDocument {
        guard let published = publishedTime(ofTargets: version), var members = document.signed["targets"]?.objectMembers else { return document }
        var changed = false
        for index in members.indices {
            let (path, value) = members[index]
            guard let target = try? TUFTarget(path: path, json: value), let release = TUFPackageTarget(target),
                release.rollout?.stagedAt != nil, case .object(var fields) = value,
                let custom = fields.firstIndex(where: { $0.0 == "custom" })
            else { continue }
            fields[custom].1 = release.resolvingRollout(publishedAt: published).custom
            members[index].1 = .object(fields)
            changed = true
        }
        guard changed else { return document }
        var resolved = document
        resolved.set([("targets", .object(members))])
        return resolved
    }
}
