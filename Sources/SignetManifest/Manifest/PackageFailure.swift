import SignetCore

/// Why a package was rejected. An open set.
public struct PackageFailure: Hashable, Sendable, CustomStringConvertible {
    /// Stable identifier.
    public let name: String
    /// 1 for verification failures, 3 for an untrusted signer.
    public let exitStatus: SignetError.ExitStatus
    /// Creates a failure kind.
    public init(_ name: String, exitStatus: SignetError.ExitStatus) {
        self.name = name
        self.exitStatus = exitStatus
    }
    public var description: String { name }

    /// No trusted key has the manifest's key id.
    public static let untrustedSigner = PackageFailure("untrusted-signer", exitStatus: .untrusted)
    /// The manifest signature does not verify.
    public static let badManifestSignature = PackageFailure("bad-manifest-signature", exitStatus: .verificationFailed)
    /// An installed tree is marked bare but was installed from a signed manifest.
    public static let relabelled = PackageFailure("relabelled-tree", exitStatus: .verificationFailed)
    /// An installed tree holds another package than the one expected (`reverify --state`,
    /// `--expect-name`).
    public static let otherPackage = PackageFailure("other-package", exitStatus: .verificationFailed)
    /// An installed tree holds an older sequence than the state file records for its name.
    public static let rollback = PackageFailure("rollback", exitStatus: .verificationFailed)
    /// The package is past its `expires` time.
    public static let expired = PackageFailure("expired", exitStatus: .verificationFailed)
    /// A resource is in the manifest but not in the archive, or has no signature.
    public static let missing = PackageFailure("missing", exitStatus: .verificationFailed)
    /// A resource is in the archive but not in the manifest.
    public static let extra = PackageFailure("extra", exitStatus: .verificationFailed)
    /// A resource's size or SHA-256 differs from the manifest.
    public static let modified = PackageFailure("modified", exitStatus: .verificationFailed)
    /// A resource's own signature does not verify.
    public static let badSignature = PackageFailure("bad-signature", exitStatus: .verificationFailed)
}

extension SignetError.Code {
    /// The one mapping from a verification verdict to an error code and exit status, used by
    /// every command that turns a verdict into a failure (exit 1, or 3 for an untrusted signer).
    public init(_ failure: PackageFailure) {
        self = failure == .untrustedSigner ? .untrustedSigner : SignetError.Code(failure.name, exitStatus: failure.exitStatus)
    }
}
