import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage
import SignetCrypto
import SignetManifest

/// What an installation did.
public struct InstallReport: Sendable {
    /// The installed tree.
    public let destination: String
    /// The package's manifest (nil for a bare package).
    public let manifest: Manifest?
    /// The installed resource paths.
    public let files: [String]
    /// The trusted key that signed it.
    public let signer: PublicKey
    /// The `sequence` of the tree it replaced, if it replaced an installed one.
    public let replacedSequence: UInt64?
    /// False when the filesystem has no user extended attributes: the signatures are then only in
    /// `DIR/.signet/sigs/` (the sidecar FORMAT.md §3 describes).
    public let attributesWritten: Bool
    /// True when an existing directory was swapped for the new tree in one `renameat2(RENAME_EXCHANGE)`.
    public let exchanged: Bool
    /// The replaced tree, when it could not be removed after the swap (an I/O error, a folder
    /// that may not be changed). The install itself succeeded; the next unpack to the same
    /// destination removes it.
    public let leftover: String?
    /// How a package read from a URL was transferred (nil for a package file).
    public internal(set) var transfer: TransferReport? = nil
    /// True when the destination already held this release (the same signed manifest) and
    /// nothing was written: without ``InstallOptions/force``, or with ``InstallOptions/repair``
    /// and a tree that checked whole. `files` is then empty.
    public internal(set) var upToDate = false
    /// With ``InstallOptions/repair``: what the check of the installed tree found wrong (one
    /// line a file, "path: verdict"), which this install then replaced. Empty otherwise.
    public internal(set) var repaired: [String] = []
    /// Resources the new tree shares with the tree it replaced (hard links to the same
    /// inodes: unchanged content, mode and attributes), none of their bytes written again.
    public internal(set) var filesShared = 0
    /// Unchanged resources copied from the tree it replaced instead of shared: a
    /// file is shared only when the inode is exactly what the new release installs — the same
    /// mode, and attributes by the release's key or another key trusted for the package
    /// — so a file signed by a key since rotated out or revoked is written again.
    public internal(set) var filesCopied = 0
    /// The replaced release is kept beside the destination (`.DIR.signet-previous`) for
    /// ``Installer/rollback(_:options:)-(String,_)``.
    public internal(set) var previousKept = false
    /// The release waits for ``Installer/confirm(_:wait:)-(String,_)`` (``InstallOptions/pending``).
    public internal(set) var pending = false
    /// With ``InstallOptions/verity``: the files this install made fs-verity files (files
    /// shared with the replaced tree that already were are measured, not counted).
    public internal(set) var verityEnabled = 0
    /// With ``InstallOptions/Verity/auto``: why fs-verity was not used (nil when it was, or was
    /// not asked for).
    public internal(set) var verityNotUsed: String? = nil
    /// What the hooks did (``InstallOptions/hooks``), in the order they ran.
    public internal(set) var hooks: [HookResult] = []
}
