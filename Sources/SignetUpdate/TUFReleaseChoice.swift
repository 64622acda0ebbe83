import SignetCore
import SignetTUF

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
    public static func choose(
        among releases: [TUFPackageTarget], deviceID: () throws -> [UInt8], at now: Timestamp,
        ignoreRollout: Bool = false, versionLock: VersionLock? = nil
    ) throws -> TUFReleaseChoice? {
        let ordered = TUFChannel.newestFirst(releases)
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
}
