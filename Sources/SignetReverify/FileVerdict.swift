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

/// What re-verification found for one file. An open set; a verdict, not an error.
public struct FileVerdict: Hashable, Sendable, CustomStringConvertible {
    /// Stable identifier, as in `--json` output.
    public let name: String
    /// Creates a verdict. Prefer the static members.
    public init(_ name: String) { self.name = name }
    public var description: String { name }

    /// The content verifies with a trusted signature.
    public static let ok = FileVerdict("ok")
    /// A lost attribute was restored (`--repair`) after the content was checked.
    public static let repaired = FileVerdict("repaired")
    /// A signature is present but the content no longer matches it (or the manifest).
    public static let modified = FileVerdict("modified")
    /// No signature attribute and no sidecar.
    public static let unsigned = FileVerdict("unsigned")
    /// Signed by a key that is not trusted.
    public static let untrusted = FileVerdict("untrusted")
    /// Could not be read (or is a symbolic link, which is never followed).
    public static let unreadable = FileVerdict("unreadable")
    /// In the manifest, not on disk.
    public static let missing = FileVerdict("missing")
    /// On disk, not in the manifest.
    public static let added = FileVerdict("added")
    /// The content matches the signed manifest but its signature attribute is gone or wrong.
    public static let attributesLost = FileVerdict("attributes-lost")
    /// The content is the signed one but the file's mode is not the manifest's (`chmod 4777`, a
    /// config made writable by others), or a folder's is not 0755; `--repair` restores it.
    public static let modeChanged = FileVerdict("mode-changed")

    /// True for `ok` and `repaired`.
    public var isOK: Bool { self == .ok || self == .repaired }
}
