import SignetCore

/// Which of the releases a channel lists a device installs (FORMAT.md §7, "Which release a
/// device installs"): a pure function of the trusted listing, the device's id, the clock and its
/// options, so that every device of a fleet, and a test, computes the same answer.
///
/// While a release rolls out, is paused or is halted, the channel keeps listing the releases
/// before it down to the last one fully rolled out (`repo add` keeps them). A device takes the
/// newest listed release that has reached it: one without a plan, or whose plan's share covers
/// its bucket now; never a halted one; only one its version lock allows. So an empty or reset
/// device gets the release its wave has reached, and one on an older release moves up to it.
public struct TUFReleaseChoice: Sendable, Equatable {
    /// Why a newer release than the chosen one was passed over, or why it was chosen.
    public enum Reason: String, Sendable {
        /// The newest release listed: it has reached this device (no plan, or its wave is open).
        case newest
        /// `--ignore-rollout`: the newest release that is not halted, whatever its wave.
        case rolloutIgnored = "rollout-ignored"
        /// A newer release's wave has not reached this device (or it is paused before it).
        case waveNotReached = "wave-not-reached"
        /// A newer release is halted.
        case halted
        /// The device's version lock excludes the newer release.
        case versionLock = "version-lock"
    }

    /// A release passed over, newest first, and why.
    public struct PassedOver: Sendable, Equatable {
        public let release: TUFPackageTarget
        public let reason: Reason
        /// Its rollout for this device (nil: no plan).
        public let rollout: RolloutStatus?
    }

    /// The release to install (nil: none has reached this device).
    public let chosen: TUFPackageTarget?
    /// Why it was chosen: `.newest`, `.rolloutIgnored`, or the reason the newest release was
    /// passed over (the chosen one is then older).
    public let reason: Reason
    /// The newest release listed.
    public let newest: TUFPackageTarget
    /// The chosen release's rollout for this device (nil: no plan, or nothing chosen).
    public let rollout: RolloutStatus?
    /// The releases newer than the chosen one, newest first, each with why it was passed over.
    public let passedOver: [PassedOver]

    /// Chooses among `releases` (one package name's releases a channel lists; at least one).
    /// `deviceID` is read only when a release has a rollout plan (it throws what reading the
    /// device id file throws).
    public static func choose(among releases: [TUFPackageTarget], deviceID: () throws -> [UInt8], at now: Timestamp,
                              ignoreRollout: Bool = false, versionLock: VersionLock? = nil) throws -> TUFReleaseChoice? {
        let ordered = newestFirst(releases)
        guard let newest = ordered.first else { return nil }
        var id: [UInt8]? = nil
        var idFailure: Error? = nil
        var passed: [PassedOver] = []
        for release in ordered {
            var status: RolloutStatus? = nil
            if let plan = release.rollout {
                // The id is read once, and needed only where the plan's share leaves some
                // devices out: an emergency `now` plan, or a halted one, needs none.
                if id == nil, idFailure == nil {
                    do { id = try deviceID() } catch { idFailure = error }
                }
                if id == nil, let idFailure, plan.state != .halted, plan.openBuckets(at: now) < TUFRollout.bucketCount { throw idFailure }
                status = TUFUpdater.rolloutStatus(of: release, deviceID: id, at: now)
            }
            let reason: Reason?
            if let lock = versionLock, !lock.allows(version: release.version, sequence: release.sequence) {
                reason = .versionLock
            } else if status?.state == .halted {
                reason = .halted
            } else if let status, !status.eligible, !ignoreRollout {
                reason = .waveNotReached
            } else {
                reason = nil
            }
            if let reason {
                passed.append(PassedOver(release: release, reason: reason, rollout: status))
                continue
            }
            let why: Reason = passed.first?.reason ?? (ignoreRollout && status?.eligible == false ? .rolloutIgnored : .newest)
            return TUFReleaseChoice(chosen: release, reason: why, newest: newest, rollout: status, passedOver: passed)
        }
        return TUFReleaseChoice(chosen: nil, reason: passed.first?.reason ?? .newest, newest: newest, rollout: nil, passedOver: passed)
    }

    /// What a device that holds none of them gets from one package name's releases in one
    /// channel at `now`, newest first: each release offered (not halted) with the buckets its
    /// wave has opened, down to the first one every device may take (its share 10,000). A new
    /// device takes the first whose wave includes its bucket (``choose(among:deviceID:at:ignoreRollout:versionLock:)``).
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
    static func newestFirst(_ releases: [TUFPackageTarget]) -> [TUFPackageTarget] {
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
