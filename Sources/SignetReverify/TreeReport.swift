import Foundation
import Synchronization
internal import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto
import SignetManifest

/// A whole installed tree's re-verification.
public struct TreeReport: Sendable {
    /// The tree.
    public let root: String
    /// Its manifest, when the manifest verified.
    public let manifest: Manifest?
    /// The trusted key that signed the manifest.
    public let signer: PublicKey?
    /// Set when the manifest itself did not verify (then `files` is empty).
    public let manifestFailure: PackageFailure?
    /// Why, for a person.
    public let manifestMessage: String?
    /// Every checked file, sorted by path.
    public let files: [FileReport]
    /// False when the filesystem has no user extended attributes (sidecars were used).
    public let attributesSupported: Bool
    /// Wall time in seconds.
    public let duration: Double

    /// Number of files per verdict.
    public var counts: [FileVerdict: Int] { files.reduce(into: [:]) { $0[$1.verdict, default: 0] += 1 } }
    /// True when the manifest verified and every file is ok (or repaired).
    public var isOK: Bool { manifestFailure == nil && files.allSatisfy(\.verdict.isOK) }
}
