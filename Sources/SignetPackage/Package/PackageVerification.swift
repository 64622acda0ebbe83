#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCrypto
import SignetManifest

/// The outcome of verifying a package: a value, not an error (FORMAT.md exit 0, 1 or 3).
public struct PackageVerification: Sendable {
    /// Why a package or a tree failed verification (the type lives in the manifest layer, where
    /// re-verification uses it too).
    public typealias Failure = PackageFailure

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
