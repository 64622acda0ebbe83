import SignetCore

/// What one channel keeps offering of one package name's releases (FORMAT.md §7, "Which
/// release a device installs"): pure functions of the trusted listing and the clock, which the
/// publisher (what `repo add` keeps listed), `repo status` (what a new device gets) and the
/// device's choice (`TUFReleaseChoice`) all read the same way.
///
/// While a release rolls out, is paused or is halted, the channel keeps listing the releases
/// before it down to the last one fully rolled out.
public enum TUFChannel {
    /// What a device that holds none of them gets from one package name's releases in one
    /// channel at `now`, newest first: each release offered (not halted) with the buckets its
    /// wave has opened, down to the first one every device may take (its share 10,000). A new
    /// device takes the first whose wave includes its bucket (`TUFReleaseChoice.choose`, in the update layer).
    public static func offered(_ releases: [TUFPackageTarget], at now: Timestamp) -> [(release: TUFPackageTarget, openBuckets: Int)] {
        var offered: [(release: TUFPackageTarget, openBuckets: Int)] = []
        for release in newestFirst(releases) {
            guard let plan = release.rollout else {
                offered.append((release, TUFRollout.bucketCount))
                break
            }
            guard plan.state != .halted else { continue }
            let open = plan.openBuckets(at: now)
            offered.append((release, open))
            if open >= TUFRollout.bucketCount { break }
        }
        return offered
    }

    /// Newest first; equal sequences (another file of the same release) by target name, so no
    /// answer depends on the listing's order.
    public static func newestFirst(_ releases: [TUFPackageTarget]) -> [TUFPackageTarget] {
        releases.sorted { ($0.sequence, $0.target) > ($1.sequence, $1.target) }
    }

    /// A release is fully rolled out at `now` when it has no plan, or its active plan has opened
    /// every bucket: a channel keeps no release older than the newest such one.
    public static func isComplete(_ release: TUFPackageTarget, at now: Timestamp) -> Bool {
        guard let plan = release.rollout else { return true }
        return plan.state == .active && plan.openBuckets(at: now) >= TUFRollout.bucketCount
    }

    /// Of one package name's releases in one channel, those the channel keeps listing: every
    /// release down to, and including, the newest one fully rolled out at `now` (all of them
    /// while none is).
    public static func kept(_ releases: [TUFPackageTarget], at now: Timestamp) -> [TUFPackageTarget] {
        let ordered = newestFirst(releases)
        guard let complete = ordered.firstIndex(where: { isComplete($0, at: now) }) else { return ordered }
        return Array(ordered[...complete])
    }
}
