#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The outcome of verifying a package: a value, not an error (FORMAT.md exit 0, 1 or 3).
public struct PackageVerification: Sendable {
    /// Why a package was rejected. An open set.
    public struct Failure: Hashable, Sendable, CustomStringConvertible {
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
        public static let untrustedSigner = Failure("untrusted-signer", exitStatus: .untrusted)
        /// The manifest signature does not verify.
        public static let badManifestSignature = Failure("bad-manifest-signature", exitStatus: .verificationFailed)
        /// An installed tree is marked bare but was installed from a signed manifest.
        public static let relabelled = Failure("relabelled-tree", exitStatus: .verificationFailed)
        /// An installed tree holds another package than the one expected (`reverify --state`,
        /// `--expect-name`).
        public static let otherPackage = Failure("other-package", exitStatus: .verificationFailed)
        /// An installed tree holds an older sequence than the state file records for its name.
        public static let rollback = Failure("rollback", exitStatus: .verificationFailed)
        /// The package is past its `expires` time.
        public static let expired = Failure("expired", exitStatus: .verificationFailed)
        /// A resource is in the manifest but not in the archive, or has no signature.
        public static let missing = Failure("missing", exitStatus: .verificationFailed)
        /// A resource is in the archive but not in the manifest.
        public static let extra = Failure("extra", exitStatus: .verificationFailed)
        /// A resource's size or SHA-256 differs from the manifest.
        public static let modified = Failure("modified", exitStatus: .verificationFailed)
        /// A resource's own signature does not verify.
        public static let badSignature = Failure("bad-signature", exitStatus: .verificationFailed)
    }

    /// The checked contents.
    public let contents: PackageContents
    /// The trusted key that signed the package, when it verified.
    public let signer: PublicKey?
    /// Why it did not verify.
    public let failure: Failure?
    /// The entry concerned, if any.
    public let entry: String?
    /// A sentence for a person.
    public let message: String

    /// True when every check passed.
    public var isValid: Bool { failure == nil }
}
