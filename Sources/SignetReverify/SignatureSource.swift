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

/// Where an installed file's signature was found (FORMAT.md §3).
public enum SignatureSource: String, Sendable, CustomStringConvertible {
    /// The `user.signet.sig` attribute.
    case xattr
    /// An IMA v2 attribute (`user.ima` or `security.ima`).
    case ima
    /// The tree's sidecar, `.signet/sigs/PATH.sig`.
    case sidecar
    /// The tree's record of the signatures unpack installed, `.signet/signatures` (what
    /// `--repair` restores a lost attribute from in a tree with user xattrs).
    case record

    /// The name printed in reports ("xattr", "ima", "sidecar", "record").
    public var description: String { rawValue }
}
