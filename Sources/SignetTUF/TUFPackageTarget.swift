import SignetCore
import SignetCrypto

/// What binds a Signet package as a TUF target: its `custom.signet` object.
public struct TUFPackageTarget: Sendable, Equatable {
    /// The target path (the package's file name).
    public let target: String
    public let name: String
    public let version: String
    public let sequence: UInt64
    /// SHA-256 of the package's `.signet/manifest.json`.
    public let manifestSHA256: String
    /// The channels this release is for.
    public let channels: [String]
    public let length: Int64
    public let sha256: String
    /// Its rollout plan (nil: every device installs it at once).
    public let rollout: TUFRollout?

    package init?(_ target: TUFTarget) {
        guard let custom = target.customJSON?["signet"], let name = custom["name"]?.stringValue, let version = custom["version"]?.stringValue,
            let sequenceText = custom["sequence"], case .number(let digits) = sequenceText, let sequence = UInt64(digits),
            let manifest = custom["manifest_sha256"]?.stringValue, manifest.count == 64,
            let channels = custom["channels"]?.arrayItems?.compactMap(\.stringValue), let sha256 = target.hashes["sha256"]
        else { return nil }
        // A plan a device cannot read is refused, not guessed: the target is no package to it.
        if let plan = custom["rollout"] {
            guard let rollout = TUFRollout(json: plan) else { return nil }
            self.rollout = rollout
        } else {
            rollout = nil
        }
        self.target = target.path
        self.name = name
        self.version = version
        self.sequence = sequence
        self.manifestSHA256 = manifest.lowercased()
        self.channels = channels
        length = target.length
        self.sha256 = sha256.lowercased()
    }

    package var custom: TUFJSON {
        var members: [(String, TUFJSON)] = [
            ("name", .string(name)), ("version", .string(version)), ("sequence", .number(String(sequence))),
            ("manifest_sha256", .string(manifestSHA256)), ("channels", .array(channels.map(TUFJSON.string)))
        ]
        if let rollout { members.append(("rollout", rollout.json)) }
        return .object([("signet", .object(members))])
    }

    package init(
        target: String, name: String, version: String, sequence: UInt64, manifestSHA256: String, channels: [String], length: Int64, sha256: String,
        rollout: TUFRollout? = nil
    ) {
        self.rollout = rollout
        self.target = target
        self.name = name
        self.version = version
        self.sequence = sequence
        self.manifestSHA256 = manifestSHA256
        self.channels = channels
        self.length = length
        self.sha256 = sha256
    }
}

extension TUFPackageTarget {
    /// The same release with its plan as devices count it once the targets version listing it
    /// was published at `publishedAt` (``TUFRollout/resolved(publishedAt:)``).
    package func resolvingRollout(publishedAt: Timestamp?) -> TUFPackageTarget {
        guard let rollout, rollout.stagedAt != nil else { return self }
        return TUFPackageTarget(
            target: target, name: name, version: version, sequence: sequence, manifestSHA256: manifestSHA256,
            channels: channels, length: length, sha256: sha256, rollout: rollout.resolved(publishedAt: publishedAt))
    }

    /// The same release listed for `channels`.
    package func withChannels(_ channels: [String]) -> TUFPackageTarget {
        TUFPackageTarget(
            target: target, name: name, version: version, sequence: sequence, manifestSHA256: manifestSHA256,
            channels: channels, length: length, sha256: sha256, rollout: rollout)
    }
}
