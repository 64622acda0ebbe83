import ArgumentParser
import Signet

/// What `update --json` prints (docs/schema/update.schema.json).
extension Update {
    struct Release: Encodable {
        let name: String
        let version: String
        let sequence: UInt64
    }

    /// A release as the repository lists it, with the SHA-256 of its signed manifest that the
    /// targets metadata binds: what --require-manifest-sha256 takes.
    struct ListedRelease: Encodable {
        let name: String
        let version: String
        let sequence: UInt64
        let manifest_sha256: String

        init(_ target: TUFPackageTarget) {
            (name, version, sequence, manifest_sha256) = (target.name, target.version, target.sequence, target.manifestSHA256)
        }

        var release: Release { Release(name: name, version: version, sequence: sequence) }
    }

    struct RepositoryReport: Encodable {
        let channel: String
        let repository: String
        let root_version: Int64
        let timestamp_version: Int64
        let role: String
        @Null var installed: Release?
        let available: ListedRelease
        let update_available: Bool
        let channel_is_older: Bool
        let updated: Bool
        let package_url: String
        @Null var transfer: Unpack.Transfer?
        let repaired: [String]
        let files_shared: Int
        let files_copied: Int
        let previous_kept: Bool
        let pending: Bool
        @Null var verity: ReleaseOptions.Verity?
        let hooks: [ReleaseOptions.Hook]
        @Null var replaced: Release?
        @Null var refused: Refused?
        @Null var rollout: Rollout?
        @Null var deferred: String?
        @Null var choice: Choice?
        @Null var log_entry: UInt64?
        @Null var log_size: UInt64?
    }

    /// Which listed release the run chose, and why (JSON `choice`; FORMAT §7).
    struct Choice: Encodable {
        struct Passed: Encodable {
            let version: String
            let sequence: UInt64
            let reason: String
        }
        @Null var chosen: ListedRelease?
        @Null var target: String?
        let reason: String
        let newest: ListedRelease
        let passed_over: [Passed]

        init(_ choice: TUFReleaseChoice) {
            chosen = choice.chosen.map(ListedRelease.init)
            target = choice.chosen?.target
            reason = choice.reason.rawValue
            newest = ListedRelease(choice.newest)
            passed_over = choice.passedOver.map { Passed(version: $0.release.version, sequence: $0.release.sequence, reason: $0.reason.rawValue) }
        }
    }

    /// The channel's release's rollout, for this device (JSON `rollout`).
    struct Rollout: Encodable {
        @Null var bucket: Int?
        let percent: Double
        let state: String
        let eligible: Bool
        @Null var eligible_at: String?
        let plan: Repo.RolloutPlan

        init(_ status: RolloutStatus) {
            bucket = status.bucket
            percent = Double(status.openBuckets) / 100
            state = status.state.rawValue
            eligible = status.eligible
            eligible_at = status.eligibleAt?.rfc3339
            plan = Repo.RolloutPlan(status.plan)
        }
    }

    struct Refused: Encodable {
        let sequence: UInt64
        let reason: String
        let at: String
    }
}
