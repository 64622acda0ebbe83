import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage
import SignetCore
import SignetCrypto
import SignetManifest
import SignetPackage

/// Options for ``Installer/install(_:to:policy:options:)-(String,_,_,_)``.
public struct InstallOptions: Sendable {
    /// Replace a non-empty destination that Signet did not install, and reinstall the release
    /// the destination already holds (without it, that install changes nothing).
    public var force = false
    /// Install a release this destination refused as bad (its health check failed, or it was
    /// rolled back) all the same: `--retry-bad`. `force` does not (one name, one
    /// meaning).
    public var retryBad = false
    /// When the destination already holds this release: check it as `reverify` does, and
    /// reinstall it only if anything differs (modified, missing or added files, modes,
    /// attributes), over ranges fetching only what differs. Without it (and without `force`),
    /// installing the release the destination holds changes nothing (``InstallReport/upToDate``).
    public var repair = false
    /// Told how many files and bytes have been verified and staged.
    public var progress: ProgressHandler? = nil
    /// Install a lower `sequence` over an installed tree of the same name.
    public var allowDowngrade = false
    /// Let the destination change product: install a package whose name differs from the
    /// installed tree's (or from what `stateFile` records for the destination), or a bare
    /// package over a tree installed from a signed manifest. The change is recorded in
    /// `stateFile` (`changed_from`). Off by default: a validly signed package of another
    /// product never replaces an installed one unasked (`unpack --change-package`).
    public var changePackage = false
    /// The older layout: resources with `<path>.sig` beside them, no manifest (FORMAT.md §2).
    public var bare = false
    /// The destination's filesystem ignores case (vfat, exFAT, NTFS, SMB): two files whose
    /// paths differ only in case (after Unicode normalisation) would be one file there, so such
    /// a package is refused before anything is written. Also applied when the filesystem the
    /// destination is made on is known to ignore case (``CaseFolding/ignoresCase(filesystemType:)``).
    public var caseInsensitiveDestination = false
    /// The algorithm of a bare package's signatures.
    public var bareAlgorithm: SignatureAlgorithm = .default
    /// Limits for the untrusted archive.
    public var limits = PackageLimits()
    /// The time expiry is judged against.
    public var now: Timestamp = .now
    /// A state file recording the highest sequence installed per package name, across
    /// destinations; a lower sequence is a rollback (unless `allowDowngrade`).
    public var stateFile: String? = nil
    /// Also write an IMA v2 signature to this attribute (`user.ima`, or `security.ima`, which
    /// needs root), so `evmctl ima_verify` and IMA appraisal accept the files. Nil for none.
    public var imaAttribute: String? = nil
    /// fs-verity for the installed files (FORMAT.md §3).
    public enum Verity: Sendable {
        /// Files are installed as they are (the default).
        case off
        /// Every file becomes an fs-verity file whose kernel-measured digest is the one the
        /// signed manifest records (`pack --verity`); a package without those digests, or a
        /// filesystem without fs-verity, is refused before anything is written.
        case on
        /// As `on` where the package and the filesystem allow it; otherwise the files are
        /// installed without it and ``InstallReport/verityNotUsed`` says why.
        case auto
    }
    /// fs-verity for the installed files: then the kernel checks every read of them, and
    /// `reverify` measures them instead of reading them.
    public var verity: Verity = .off
    /// How long to wait, in seconds, for another process that is updating the destination.
    public var wait: Double = 10
    /// The device's key for an encrypted package (FORMAT.md §8): the package is decrypted
    /// beside the destination, each chunk authenticated, then verified and installed as any
    /// other. An encrypted package without a key, or one not sealed to it, is refused
    /// (`not-a-recipient`, exit 3) before anything is written.
    public var decryptionKey: DecryptionKey? = nil
    /// The package signed metadata names (`signet update`): the install is bound to it
    /// (``/SignetPackage/PackageBinding``).
    public var expectedPackage: PackageBinding? = nil
    /// A package file or URL installs only when a transparency log holds it (FORMAT.md §10):
    /// its proof is checked before anything of it is read, and the install is bound to the
    /// logged entry.
    public var transparency: TransparencyRequirement? = nil
    /// Set once the proof is checked (a download then installs from its partial file).
    var transparencyChecked = false
    /// The SHA-256 (lowercase hex) of the signed manifest of the one release to install — the
    /// release a person or an agent confirmed (`update --check` reports it). Another release,
    /// even one correctly signed, is refused (`not-confirmed`, exit 1) before any resource is
    /// read or fetched.
    public var requiredManifestSHA256: String? = nil
    /// Told each step of the install as it starts (``/SignetCore/WorkPhase``): for an agent's
    /// or a UI's events.
    public var phase: PhaseHandler? = nil
    /// Where the package came from (a URL), recorded as `source` in each file's
    /// `user.signet.meta`; set by `Installer.install(downloading:to:policy:options:download:)`.
    public var source: String? = nil
    /// Keep the release a swap replaces beside the destination (`.DIR.signet-previous`),
    /// sharing its unchanged files with the new one, so that ``Installer/rollback(_:options:)-(String,_)``
    /// can swap it back. Off: the replaced tree is removed, and so is any previous
    /// release kept before (`--keep-previous=no`).
    public var keepPrevious = true
    /// Leave the new release pending until ``Installer/confirm(_:wait:)-(String,_)``: a boot without a
    /// confirmation rolls it back (`signet rollback --boot-check`, the boot unit).
    public var pending = false
    /// Commands run around the swap: a pre-install command, a post-install command and a
    /// health check.
    public var hooks = InstallHooks()
    /// When the swap may happen (empty: any time). Outside them the release is
    /// staged and verified, then kept beside DIR for the next run (`.installDeferred`).
    public var windows: [MaintenanceWindow] = []
    /// The clock the windows are judged by, read at the swap (after the download, the staging
    /// and the pre-install command), not when the run started (FORMAT §7): a slow
    /// link, or a path that only delays traffic, cannot carry a swap out of its window. `now`
    /// stays the time expiry and the rollout decision are judged against.
    public var clock: @Sendable () -> Timestamp = { .now }

    /// The defaults: refuse to replace foreign directories and to roll back.
    public init() {}
}
