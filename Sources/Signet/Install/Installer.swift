import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetShims
internal import SystemPackage

/// Options for ``Installer/install(_:to:policy:options:)``.
public struct InstallOptions: Sendable {
    /// Replace a non-empty destination that Signet did not install.
    public var force = false
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
    /// How long to wait, in seconds, for another process that is updating the destination.
    public var wait: Double = 10
    /// The package a channel index names (`signet update`): once the manifest verified, and
    /// before any resource is read or fetched, its SHA-256, name and sequence must be these
    /// (`.indexMismatch`, exit 1, otherwise); a package downloaded whole must also have this
    /// size and SHA-256.
    public var expectedPackage: ChannelIndex.Package? = nil
    /// Where the package came from (a URL), recorded as `source` in each file's
    /// `user.signet.meta`; set by `Installer.install(downloading:to:policy:options:download:)`.
    public var source: String? = nil
    /// The destination is a sealed directory (a trust directory, a folder of TLS roots) that
    /// this install replaces: seal the new tree with the device's salt before the swap, after
    /// checking that it can be used as the old one was (``SealRenewal``). A sealed destination
    /// that Signet did not install, and that matches its seal with this salt, may then be
    /// replaced without `force`. Without it, a sealed destination is replaced only by a package
    /// that brings its own seal (`.destinationRefused`, exit 5, otherwise): an install never
    /// leaves a directory unsealed that was sealed.
    public var reseal: SealRenewal? = nil

    /// The defaults: refuse to replace foreign directories and to roll back.
    public init() {}

    /// Whether a destination Signet did not install may be replaced: `force`, or a sealed
    /// directory that `reseal` adopts.
    func replacesForeign(_ destination: String) -> Bool {
        force || reseal?.adopts(destination) == true
    }
}

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
}

/// Installs packages (FORMAT.md §2 "Installing"): everything is verified before DIR changes; the
/// new tree is built in a staging directory beside DIR (same filesystem), each file written
/// through its own descriptor, given its signature attributes, mode and fsync; then DIR is
/// swapped for it in one atomic step. On any failure DIR is unchanged and the staging is removed.
public enum Installer {
    /// Verifies `package` against `policy` and installs it at `destination`.
    ///
    /// Throws ``SignetError``: `.untrustedSigner` (exit 3); a verification failure, `.rollback`
    /// (exit 1); `.malformedArchive` / `.malformedManifest` (exit 4); `.destinationRefused`, I/O
    /// errors (exit 5). Whatever is thrown, `destination` is as it was.
    public static func install(_ package: String, to destination: String, policy: TrustPolicy,
                               options: InstallOptions = InstallOptions()) throws -> InstallReport {
        let destination = try normalizedDestination(destination)
        try Paths.createDirectories(AtomicFile.parentDirectory(of: destination), mode: 0o755, what: "directory")
        // One update of DIR at a time: the rollback check and the swap happen under this lock.
        let lock = try DestinationLock(destination, wait: options.wait)
        defer { lock.release() }
        return try install(package, to: destination, policy: policy, options: options, holding: lock)
    }

    /// The destination as it is locked and swapped: without trailing slashes ("dir/" would
    /// make lstat follow a symbolic link at dir: the name itself is judged), and, where its last
    /// component is `.` or `..` (`--dest .` from inside the tree), its real path, since a tree
    /// cannot be swapped through the name `.`.
    static func normalizedDestination(_ destination: String) throws -> String {
        var destination = destination
        while destination.count > 1 && destination.hasSuffix("/") { destination.removeLast() }
        let last = destination.split(separator: "/").last
        guard destination.isEmpty || last == "." || last == ".." else { return destination }
        guard let resolved = realpath(destination.isEmpty ? "." : destination, nil) else {
            throw SignetError.posix(errno, "cannot use destination", path: destination, call: "realpath")
        }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// ``install(_:to:policy:options:)`` with the destination's lock already held (a download
    /// into DIR takes it before the download starts).
    static func install(_ package: String, to destination: String, policy: TrustPolicy,
                        options: InstallOptions, holding lock: DestinationLock) throws -> InstallReport {
        // What an interrupted or killed unpack of DIR left behind (its process is gone).
        let stale = TemporaryFiles.removeStale(besides: destination)
        let state = try DestinationState.inspect(destination, force: options.replacesForeign(destination))
        let reader = try ZipReader(path: package, maximumEntries: options.limits.maximumEntries)
        return try install(reader: reader, package: package, to: destination, state: state, stale: stale, policy: policy,
                           options: options, ranged: nil)
    }

    /// The installation proper, from an open reader: a local package, or one read with range
    /// requests (`ranged`), whose unchanged files are copied from the installed tree.
    static func install(reader: ZipReader, package: String, to destination: String, state: DestinationState, stale: [String],
                        policy: TrustPolicy, options: InstallOptions, ranged: RangedUpdate?) throws -> InstallReport {
        let job = Job(package: package, destination: destination, reader: reader,
                      layout: try PackageReader.Layout(reader: reader, limits: options.limits, bare: options.bare),
                      policy: policy, options: options)

        // Phase 1: the manifest and the rollback rules, before anything is written.
        var (checked, installState) = try job.checkManifest(replacing: state)
        if let expected = options.expectedPackage { try Self.checkBinding(expected, checked: checked, package: package) }
        try Self.checkSeal(of: destination, replacedBy: job.resources(checked).map(\.path), options: options, package: package)
        if options.caseInsensitiveDestination || CaseFolding.ignoresCase(at: AtomicFile.parentDirectory(of: destination)) {
            try CaseFolding.refuseCollisions(job.resources(checked).map(\.path), package: package)
        }

        // Phase 2: every resource, verified while it streams into the staging directory.
        let staging = try Staging(besides: destination)
        // The verified manifest's bytes go into the staged tree now rather than being held to
        // the end (8.7 MiB of a 50,000-file package's peak; issue 28).
        if let bytes = checked?.manifestBytes {
            checked?.manifestBytes = []
            try staging.writeFile(TreeLayout.manifest, bytes)
        }
        var installed = false
        // Over ranges, a transfer that failed (the link dropped, --max-time) leaves what it staged
        // for the next run to take over (FORMAT.md §5); anything else removes it.
        var keepForNextRun = false
        defer { if !installed && !keepForNextRun { _ = staging.remove() } }
        var signer = checked?.key
        var attributesWritten = true
        var files: [String] = []
        // Every signature, in manifest order, in one file (not a sidecar file per resource).
        let record = try checked.map { try SignatureRecord.Writer(fd: try staging.createFile(TreeLayout.signatureRecord), path: staging.path, length: $0.key.signatureLength, digest: $0.algorithm.digest) }
        let resources = job.resources(checked)
        // Over ranges: which files the installed tree already holds (copied, not fetched).
        let reused = try ranged?.prepare(resources, job: job, state: state) ?? []
        let progress = ProgressCounter.make(options.progress, items: resources.count, bytes: resources.reduce(0) { $0 &+ $1.size })
        // Each resource's signature is verified on the second core while the next ones stage;
        // all of them before anything is installed, and the first failure in manifest order is
        // the one reported, as when each is checked in turn.
        let signatures = checked.map { SignatureChecks(key: $0.key, algorithm: $0.algorithm) }
        func firstBadSignature() -> SignetError? {
            signatures?.firstRejection().map { Self.error(for: $0.failure, $0.message, package: package, entry: $0.entry) }
        }
        do {
            for (index, file) in resources.enumerated() {
                let later = signatures.map { checks in { checks.submit(index: index, file: file, signature: $0, digest: $1) } }
                var copied: Job.Staged? = nil
                if let ranged, let checked, index < reused.count, reused[index] {
                    copied = try ranged.copy(file, index: index, job: job, into: staging, checked: checked, later: later)
                }
                let staged = try copied ?? job.stage(file, into: staging, checked: checked, signer: signer, progress: progress, later: later)
                if copied == nil { ranged?.countFetched(file) }
                progress?.add(items: 1)
                signer = signer ?? staged.signer
                attributesWritten = attributesWritten && staged.attributesWritten
                try record?.append(staged.signature)
                files.append(file.path)
            }
        } catch {
            if let bad = firstBadSignature() { throw bad }
            if ranged != nil, var failure = error as? SignetError, failure.code == .network {
                keepForNextRun = true
                failure.reason += "; what was fetched is kept beside '\(destination)' for the next run, which fetches only the rest"
                throw failure
            }
            throw error
        }
        if let failure = firstBadSignature() { throw failure }
        guard let signer else { throw SignetError(.malformedArchive, "'\(package)' holds no resources; nothing was installed", path: package) }
        if let checked {
            try record?.finish()
            try job.checkRecordSignature(checked, digest: record?.digest, into: staging)
            try job.stageRecord(checked, into: staging)
        } else {
            // A bare tree: marked, so that reverify and the next unpack know it as Signet's.
            try staging.writeFile(TreeLayout.bareMarker, Array("signet-bare/1\n".utf8))
        }

        try options.reseal?.renew(staged: staging.path, destination: destination, package: package)

        // Phase 3: the swap, then the record of what was installed.
        try staging.finish()
        let (exchanged, leftover) = try staging.install(at: destination, replacing: state)
        installed = true
        progress?.finish()
        if let installState {
            let before = installState.destination(destination)?.name ?? state.installedName
            let changedFrom = options.changePackage && before != nil && !Self.sameName(before, checked?.manifest.name) ? before : nil
            try installState.record(checked?.manifest.name, sequence: checked?.manifest.sequence, destination: destination, changedFrom: changedFrom)
        }
        var replaced: UInt64? = nil
        if case .installed(let manifest?) = state { replaced = manifest.sequence }
        return InstallReport(destination: destination, manifest: checked?.manifest, files: files, signer: signer,
                             replacedSequence: replaced, attributesWritten: attributesWritten, exchanged: exchanged,
                             leftover: leftover ?? stale.first, transfer: ranged?.report)
    }

    /// One installation: the package as read, where it goes and the rules it is held to.
    struct Job {
        /// What staging one resource gave: the key that signed it, whether the filesystem took
        /// user attributes, and its signature.
        typealias Staged = (signer: PublicKey, attributesWritten: Bool, signature: [UInt8])

        let package: String
        let destination: String
        let reader: ZipReader
        let layout: PackageReader.Layout
        let policy: TrustPolicy
        let options: InstallOptions

        /// Verifies the manifest and applies the rollback rules (the installed tree's sequence
        /// and the state file's); nil for a bare package. The state stays locked until the new
        /// sequence is recorded.
        func checkManifest(replacing state: DestinationState) throws -> (PackageReader.Checked?, InstallState?) {
            var checked: PackageReader.Checked? = nil
            if !options.bare {
                switch try PackageReader.checkManifest(reader: reader, layout: layout, policy: policy, limits: options.limits, now: options.now) {
                case .rejected(let verdict): throw error(for: verdict.failure!, verdict.message, package: package, entry: verdict.entry)
                case .checked(let value): checked = value
                }
            }
            let manifest = checked?.manifest
            var installState: InstallState? = nil
            if let stateFile = options.stateFile {
                let recorded = try InstallState(path: stateFile)
                installState = recorded
                if let manifest, let highest = recorded.sequences[manifest.name], manifest.sequence < highest, !options.allowDowngrade {
                    throw SignetError(.rollback, "\(manifest.name) sequence \(highest) was installed before (recorded in '\(stateFile)'); the package has sequence \(manifest.sequence), an older release. Refusing to roll back (--allow-downgrade overrides)", path: package)
                }
                // What the state says this destination holds, whatever DIR holds now (a tree
                // deleted or emptied does not make room for another product).
                if let previous = recorded.destination(destination) {
                    try checkSameProduct(installed: previous.name, kind: previous.kind, manifest: manifest, where: "recorded in '\(stateFile)'")
                }
            }
            switch state {
            case .installed(let installed?):
                try checkSameProduct(installed: installed.name, kind: "manifest", manifest: manifest, where: "installed")
                if let manifest, Installer.sameName(installed.name, manifest.name), manifest.sequence < installed.sequence, !options.allowDowngrade {
                    throw SignetError(.rollback, "'\(destination)' holds \(installed.name) sequence \(installed.sequence); the package has sequence \(manifest.sequence), an older release. Refusing to roll back (--allow-downgrade overrides)", path: destination)
                }
            case .bare, .installed(nil), .absent, .empty, .foreign:
                break
            }
            return (checked, installState)
        }

        /// Refuses (`.otherPackage`, exit 1) a package that would make DIR another product: a
        /// manifest of another name (compared byte for byte), or a bare package, over a tree
        /// installed from a signed manifest; unless `--change-package`.
        func checkSameProduct(installed name: String?, kind: String, manifest: Manifest?, where origin: String) throws {
            guard !options.changePackage, kind == "manifest", let name else { return }
            guard let manifest else {
                throw SignetError(.otherPackage, "'\(destination)' holds package '\(name)' (\(origin)), installed from a signed manifest; the bare package '\(package)' has no name, no rollback and no completeness check, and does not replace it. Pass --change-package if '\(destination)' is meant to change product", path: destination)
            }
            guard Installer.sameName(name, manifest.name) else {
                throw SignetError(.otherPackage, "'\(destination)' holds package '\(name)' (\(origin)); '\(package)' is package '\(manifest.name)', another product. Refusing to replace one with the other; pass --change-package if '\(destination)' is meant to become '\(manifest.name)' (the change is recorded in --state)", path: destination)
            }
        }

        /// The resources to install: the manifest's, or a bare package's in archive order.
        func resources(_ checked: PackageReader.Checked?) -> [Manifest.File] {
            if let checked { return checked.manifest.files }
            return layout.resourcePaths.map { Manifest.File(path: $0, size: layout.resource($0)!.size, sha256: "", mode: .regular) }
        }

        /// Writes one resource into the staging directory while verifying it, then gives it its
        /// signature attributes, mode and fsync, and its sidecar signature. Returns the key that
        /// signed it and whether the filesystem took user attributes.
        func stage(_ file: Manifest.File, into staging: Staging, checked: PackageReader.Checked?, signer known: PublicKey?,
                   progress: ProgressCounter? = nil,
                   later: ((_ signature: [UInt8], _ digest: Digest) -> Void)? = nil) throws -> (signer: PublicKey, attributesWritten: Bool, signature: [UInt8]) {
            let fd = try staging.createFile(file.path, mode: mode_t(file.mode.permissions))
            defer { close(fd) }
            let writer = StagedWriter(fd: fd, path: file.path, destination: destination)
            // A structured resource's signed copy under .signet/structured/, written from the
            // same verified stream (re-verification compares the resource with it key by key).
            let copyPath = file.structured != nil && checked != nil ? TreeLayout.structuredCopy(of: file.path) : nil
            let copyFD = try copyPath.map { try staging.createFile($0, mode: 0o644) }
            defer { if let copyFD { close(copyFD) } }
            let copy = copyFD.map { StagedWriter(fd: $0, path: copyPath!, destination: destination) }
            let signature: [UInt8]
            let sha256: String
            let signer: PublicKey
            if let checked {
                switch try PackageReader.checkResource(file, reader: reader, layout: layout, checked: checked, sink: { chunk in
                    try writer.write(chunk)
                    try copy?.write(chunk)
                    progress?.add(bytes: chunk.count)
                }, later: later) {
                case .verified(let verified): signature = verified
                case .rejected(let failure, let message, let entry): throw error(for: failure, message, package: package, entry: entry)
                }
                sha256 = file.sha256
                signer = checked.key
            } else {
                let (digest, sig, key) = try bareResource(file.path, reader: reader, layout: layout, policy: policy, options: options, package: package) {
                    try writer.write($0)
                    progress?.add(bytes: $0.count)
                }
                (sha256, signature, signer) = (digest, sig, known ?? key)
            }
            let algorithm = checked?.algorithm ?? options.bareAlgorithm
            let attributesWritten = try setAttributes(fd, file.path, signature: signature, sha256: sha256, signer: signer, manifest: checked?.manifest, algorithm: algorithm)
            do {
                try staging.ensureMode(fd, mode_t(file.mode.permissions))
                if let copyFD { try staging.ensureMode(copyFD, 0o644) }
                writer.finish()   // made durable with the whole tree by Staging.finish()
                copy?.finish()
            } catch {
                throw SignetError.posix(error, "cannot finish the staged copy of '\(file.path)' beside", path: destination)
            }
            // The sidecar FORMAT.md §3 asks for where there are no user attributes, and beside
            // a bare package's files (which have no signature record).
            if !attributesWritten || checked == nil {
                try staging.writeFile(TreeLayout.signature(of: file.path), signature)
            }
            return (signer, attributesWritten, signature)
        }

        /// `user.signet.sig`, `user.signet.meta` and, if asked, the IMA attribute. False when
        /// the filesystem has no user attributes (the sidecar then carries the signature).
        func setAttributes(_ fd: Int32, _ path: String, signature: [UInt8], sha256: String, signer: PublicKey,
                                   manifest: Manifest?, algorithm: SignatureAlgorithm) throws -> Bool {
            var written = true
            switch ExtendedAttributes.set(ExtendedAttributes.signature, signature, on: fd) {
            case .success:
                let meta = try metadata(path: path, sha256: sha256, signer: signer, manifest: manifest, algorithm: algorithm, source: options.source)
                // The meta attribute is informational: no room for it is not a failure.
                if case .failure(let failure) = ExtendedAttributes.set(ExtendedAttributes.metadata, meta, on: fd), !failure.isNoRoom {
                    throw failure.error("set", attribute: ExtendedAttributes.metadata, path: path)
                }
            case .failure(let failure) where failure.isUnsupported:
                written = false
            case .failure(let failure):
                throw failure.error("set", attribute: ExtendedAttributes.signature, path: path)
            }
            guard let imaAttribute = options.imaAttribute else { return written }
            guard let ima = IMASignature(signatureBytes: signature, algorithm: algorithm, key: signer) else {
                throw SignetError(.usage, "IMA signatures are RSA PKCS#1 v1.5; this package is signed with \(algorithm.id), so --ima cannot be used", path: package)
            }
            if case .failure(let failure) = ExtendedAttributes.set(imaAttribute, ima.bytes, on: fd) {
                if failure.code == EPERM {
                    throw SignetError(.permissionDenied, "cannot write \(imaAttribute) on '\(path)': security.* attributes need root (CAP_SYS_ADMIN); run as root or use --ima user", path: destination)
                }
                throw failure.error("set", attribute: imaAttribute, path: path)
            }
            return written
        }

        /// `.signet/signatures.sig`, when the package has one: it must be the manifest key's
        /// signature over the record just written (the package's per-file signatures in
        /// manifest order), else the package is refused; it is kept in the tree, where it lets a
        /// tree check believe the record.
        func checkRecordSignature(_ checked: PackageReader.Checked, digest: Digest?, into staging: Staging) throws {
            guard let entry = layout.recordSignature, let digest else { return }
            let signature = try reader.readAll(entry, limit: 64 * 1024, name: TreeLayout.signatureRecordSignature)
            guard signature.count == checked.key.signatureLength,
                  Verifier.check(signature, digest: digest, key: checked.key, algorithm: checked.algorithm) else {
                throw SignetError(.badSignature, "'\(package)' does not verify: \(TreeLayout.signatureRecordSignature), the signature over its per-file signatures, does not verify with the manifest's key (a signature entry was replaced, or the package was altered); nothing was installed", path: package, entry: TreeLayout.signatureRecordSignature)
            }
            try staging.writeFile(TreeLayout.signatureRecordSignature, signature)
        }

        /// The tree's own record: the manifest, its signature and the certificates.
        func stageRecord(_ checked: PackageReader.Checked, into staging: Staging) throws {
            // The manifest itself was staged first (install(reader:…)).
            try staging.writeFile(TreeLayout.manifestSignature, checked.manifestSignature)
            for (name, entry) in layout.certificates {
                try staging.writeFile(name, try reader.readAll(entry, limit: 1 << 20, name: name))
            }
        }
    }

    /// The package must be the one a channel index binds: the same signed manifest (SHA-256 of
    /// its bytes), name and sequence.
    /// A sealed destination (`.signet-trust`) is replaced only by a tree that is sealed too:
    /// resealed with the device's salt (`reseal`), or bringing the publisher's seal.
    static func checkSeal(of destination: String, replacedBy paths: [String], options: InstallOptions, package: String) throws {
        if let reseal = options.reseal { return try reseal.refuseOwnSeal(paths, package: package) }
        guard TrustStoreSeal.isSealed(destination), !paths.contains(where: { $0.utf8.elementsEqual(TrustStoreSeal.fileName.utf8) }) else { return }
        throw SignetError(.destinationRefused, "'\(destination)' is a sealed directory (it has \(TrustStoreSeal.fileName)) and '\(package)' brings no seal: installed as it is, the directory would be left unsealed. Pass --reseal with --trust-salt-file to seal the new tree with this device's salt, or remove \(TrustStoreSeal.fileName) first if it should no longer be sealed", path: destination)
    }

    static func checkBinding(_ expected: ChannelIndex.Package, checked: PackageReader.Checked?, package: String) throws {
        guard let checked else {
            throw SignetError(.indexMismatch, "'\(package)' is a bare package; the channel index names \(expected.name) sequence \(expected.sequence). Nothing was installed", path: package)
        }
        let digest = try Digest.compute(checked.manifestBytes, algorithm: .sha256)
        guard digest.matches(hex: expected.manifestSHA256), sameName(checked.manifest.name, expected.name), checked.manifest.sequence == expected.sequence else {
            throw SignetError(.indexMismatch, "'\(package)' is \(checked.manifest.name) sequence \(checked.manifest.sequence) with manifest SHA-256 \(digest.hex); the channel index binds \(expected.name) sequence \(expected.sequence) with manifest SHA-256 \(expected.manifestSHA256). The package on the server is not the one the index was signed for. Nothing was installed", path: package)
        }
    }

    /// Package names are compared byte for byte: canonically equivalent spellings are different
    /// products.
    static func sameName(_ a: String?, _ b: String?) -> Bool {
        switch (a, b) {
        case (nil, nil): return true
        case (let a?, let b?): return a.utf8.elementsEqual(b.utf8)
        default: return false
        }
    }

    /// `user.signet.meta`: compact JSON, informational (FORMAT.md §3). Keys sorted, absent
    /// values left out, the bytes `JSONEncoder` with `[.sortedKeys, .withoutEscapingSlashes]`
    /// made (a test keeps them equal), written directly: it is made once per installed file.
    static func metadata(path: String, sha256: String, signer: PublicKey, manifest: Manifest?, algorithm: SignatureAlgorithm,
                         source: String? = nil) throws -> [UInt8] {
        var out = ManifestWriter(capacity: 192 + path.utf8.count + (manifest?.name.utf8.count ?? 0) + (source?.utf8.count ?? 0))
        var first = true
        func field(_ key: String, _ value: (inout ManifestWriter) -> Void) {
            out.raw(first ? "{" : ",")
            first = false
            out.string(key)
            out.raw(":")
            value(&out)
        }
        field("alg") { $0.string(algorithm.id) }
        field("key_id") { $0.string(signer.keyID.hex) }
        if let name = manifest?.name { field("name") { $0.string(name) } }
        field("path") { $0.string(path) }
        if let sequence = manifest?.sequence { field("sequence") { $0.raw(String(sequence)) } }
        field("sha256") { $0.string(sha256) }
        if let source { field("source") { $0.string(source) } }
        out.raw("}")
        return out.bytes
    }

    /// A bare resource: streamed while hashed, then its `.sig` checked against every trusted key.
    static func bareResource(_ path: String, reader: ZipReader, layout: PackageReader.Layout, policy: TrustPolicy, options: InstallOptions,
                             package: String, sink: (UnsafeRawBufferPointer) throws -> Void) throws -> (String, [UInt8], PublicKey) {
        guard let signatureEntry = layout.signature(path) else {
            throw SignetError(.missingSignature, "'\(path)' has no signature '\(path).sig' in the bare package '\(package)'; every file needs one", path: package, entry: path)
        }
        let entry = layout.resource(path)!
        let algorithms = options.bareAlgorithm.digest == .sha256 ? [DigestAlgorithm.sha256] : [.sha256, options.bareAlgorithm.digest]
        let hashers = try algorithms.map { try Digest.Hasher($0) }
        try reader.read(entry, limit: options.limits.maxTotalSize, name: path) { chunk in
            hashers.forEach { $0.update(chunk) }
            try sink(chunk)
        }
        let digests = try hashers.map { try $0.finalize() }
        let signature = try reader.readAll(signatureEntry, limit: 64 * 1024, name: path + ".sig")
        let result = Verifier(policy: policy).verify(signature: signature, digest: digests.last!, algorithm: options.bareAlgorithm)
        guard let key = result.signer else {
            // The same verdict as `signet verify` gives: a signature only a refused key verifies is exit 3.
            let code: SignetError.Code = result.failure == .untrusted ? .untrustedSigner : result.failure == .wrongLength ? .wrongSignatureLength : .badSignature
            throw SignetError(code, "'\(path)' in '\(package)': \(result.message)", path: package, entry: path)
        }
        return (digests[0].hex, signature, key)
    }

    /// Writes a staged file and starts its writeback every few MiB (sync_file_range), so the
    /// disk works while a large file is still being read and hashed, and the one durability
    /// step of the tree (``Staging/finish()``, syncfs) has little left to wait for.
    final class StagedWriter {
        let fd: Int32
        let path: String
        let destination: String
        private var written: Int64 = 0
        private var flushed: Int64 = 0
        static let writebackStep: Int64 = 8 << 20

        init(fd: Int32, path: String, destination: String) {
            self.fd = fd
            self.path = path
            self.destination = destination
        }

        func write(_ chunk: UnsafeRawBufferPointer) throws {
            try Installer.writeAll(chunk, to: fd, path: path, destination: destination)
            written += Int64(chunk.count)
            if written - flushed >= Self.writebackStep {
                // Best effort: a filesystem that cannot do it still gets the final fsync.
                _ = signet_start_writeback(fd, flushed, written - flushed)
                flushed = written
            }
        }

        /// Starts writeback of the tail of a large file (best effort: the tree's syncfs writes
        /// whatever this did not). Small files are left to syncfs alone: starting writeback of
        /// each one as it is written made 10,000 small files 2-3x slower to make durable than
        /// one syncfs over all of them (bench/durability.py), since the filesystem can no
        /// longer allocate and write them together.
        func finish() {
            if written >= Self.writebackStep, written > flushed { _ = signet_start_writeback(fd, flushed, 0) }
            flushed = written
        }
    }

    static func writeAll(_ chunk: UnsafeRawBufferPointer, to fd: Int32, path: String, destination: String) throws {
        do { try FileDescriptor(fd).write(all: chunk) } catch {
            throw SignetError.posix(error, "cannot write the staged copy of '\(path)' beside", path: destination)
        }
    }

    static func error(for failure: PackageVerification.Failure, _ message: String, package: String, entry: String?) -> SignetError {
        return SignetError(SignetError.Code(failure), "'\(package)': \(message); nothing was installed", path: package, entry: entry)
    }
}

/// What is at the destination before installing.
enum DestinationState {
    case absent
    case empty
    /// A tree Signet installed; its manifest (nil if it cannot be read, which --force must then confirm).
    case installed(Manifest?)
    /// A tree unpack `--bare` installed (no manifest).
    case bare
    /// Something else, replaced only with --force.
    case foreign

    /// The package name of an installed tree, when it has a readable manifest.
    var installedName: String? {
        if case .installed(let manifest?) = self { return manifest.name }
        return nil
    }

    static func inspect(_ destination: String, force: Bool) throws -> DestinationState {
        let present: stat?
        do { present = try Paths.lstatIfPresent(destination) } catch {
            throw SignetError.posix(error, "cannot use destination", path: destination)
        }
        guard let info = present else { return .absent }
        guard info.st_mode & S_IFMT != S_IFLNK else {
            throw SignetError(.destinationRefused, "destination '\(destination)' is a symbolic link; give the real directory", path: destination)
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw SignetError(.destinationRefused, "destination '\(destination)' exists and is not a directory", path: destination)
        }
        let fd: Int32
        let names: [DirectoryEntries.Entry]
        do {
            fd = try Paths.open(destination, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        } catch {
            throw SignetError.posix(error, "cannot read the destination directory", path: destination)
        }
        defer { close(fd) }
        // An unreadable directory would list as empty through readdir's silence: the walker throws.
        do { names = try DirectoryEntries.list(fd) } catch let failure as SystemCallFailure {
            throw SignetError.posix(failure, "cannot read the destination directory", path: destination)
        }
        if names.isEmpty { return .empty }
        // Absent, a link, not a file, too large or not a manifest: not a tree Signet installed
        // (--force decides). A read error is an I/O error, never taken for "foreign".
        let bytes: [UInt8]?
        do {
            bytes = try InputFile.readBeneath(fd, TreeLayout.manifest, rootPath: destination, what: "installed manifest", limit: 64 << 20)
        } catch let error as SignetError where error.code == .malformedInput {
            bytes = nil
        }
        if let bytes {
            let manifest = try? Manifest.parse(bytes)
            if manifest != nil || force { return .installed(manifest) }
        } else if Reverifier.isBareTree(fd) {
            // A tree unpack --bare installed: Signet's, with no manifest (no rollback check);
            // unless its files say they came from a signed manifest (the manifest's signature
            // removed and the bare marker added: that would skip every check the manifest gives).
            if let origin = Reverifier.manifestOrigin(of: fd), !force {
                throw SignetError(.relabelledTree, "'\(destination)' is marked as a bare tree, but its files were installed from the signed package '\(origin.name)' sequence \(origin.sequence) (their user.signet.meta says so): its manifest or manifest signature was removed. Reinstall it, or pass --force to replace it", path: destination)
            }
            return .bare
        }
        guard force else {
            throw SignetError(.destinationRefused, "destination '\(destination)' is not empty and holds no tree Signet installed (no readable .signet/manifest.json); choose a new or empty directory, or pass --force to replace it", path: destination)
        }
        return .foreign
    }
}

/// The lock on one destination: `.DIR.signet-lock` beside DIR (not inside the tree that is
/// swapped), held with `flock` from the rollback check to the swap, so two updates of DIR never
/// interleave. It holds the holder's process id, for the message a waiting process shows.
///
/// The lock file is a ``PrivateFile`` (another user's file under that name is never read or
/// locked), and it is removable: when DIR does not exist at release (a refused first install),
/// the holder unlinks it while still holding it, and every locker checks after locking that the
/// path still names the file it locked, else locks the new one.
final class DestinationLock {
    private var descriptor: Int32
    private let path: String
    private let destination: String

    init(_ destination: String, wait: Double) throws {
        let (directory, prefix) = TemporaryFiles.prefix(besides: destination)
        let path = directory + "/" + prefix + "lock"
        self.path = path
        self.destination = destination
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, min(wait, 86_400)) * 1e9)
        while true {
            let fd = try PrivateFile.open(path, mode: 0o644, what: "lock").descriptor
            if flock(fd, LOCK_EX | LOCK_NB) == 0 {
                guard PrivateFile.stillNamed(fd, path) else {
                    close(fd)   // removed by its last holder while we waited: lock the new one
                    continue
                }
                let text = Array("\(getpid())\n".utf8)
                _ = ftruncate(fd, 0)
                _ = pwrite(fd, text, text.count, 0)
                descriptor = fd
                return
            }
            let err = errno
            guard err == EWOULDBLOCK || err == EINTR else {
                close(fd)
                throw SignetError.posix(err, "cannot lock the destination at", path: path, call: "flock")
            }
            if TemporaryFiles.isInterrupted {
                close(fd)
                throw SignetError(.interrupted, "interrupted while waiting for another update of '\(destination)'; nothing was changed", path: destination)
            }
            if DispatchTime.now().uptimeNanoseconds >= deadline {
                var holder = [UInt8](repeating: 0, count: 32)
                let n = (try? holder.withUnsafeMutableBytes { try FileDescriptor(fd).read(fullyAt: 0, into: $0) }) ?? 0   // only for the message
                close(fd)
                let digits = holder.prefix(n).prefix { $0 != 0x0A }
                let pid = !digits.isEmpty && digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) ? String(decoding: digits, as: UTF8.self) : "?"
                throw SignetError(.destinationBusy, "'\(destination)' is being updated by process \(pid); try again when it has finished, or wait longer with --wait SECONDS", path: destination)
            }
            usleep(20_000)
        }
    }

    func release() {
        guard descriptor >= 0 else { return }
        _ = ftruncate(descriptor, 0)
        // Beside a DIR that was never made (or is gone) the lock file goes too, unlinked while
        // it is still held.
        let absent: Bool
        do { absent = try Paths.lstatIfPresent(destination) == nil } catch { absent = false }
        if absent, PrivateFile.stillNamed(descriptor, path) {
            _ = try? Paths.withParent(of: path) { directory, name in unlinkat(directory, name, 0) }
        }
        _ = flock(descriptor, LOCK_UN)
        close(descriptor)
        descriptor = -1
    }

    deinit { release() }
}

/// The staging directory: a sibling of the destination (so on its filesystem), private (0700)
/// while it is built, named after this process and registered for removal on interruption,
/// written only through descriptors opened with O_NOFOLLOW below it. Every call names the
/// parent through one descriptor, so the destination's path may be of any length.
final class Staging {
    let path: String
    private let name: String
    private let parent: Int32
    private let root: Int32
    private var token: Int
    private var asideToken: Int? = nil
    private var directories: [String: Int32] = [:]
    /// The process's umask as this install started (nil if unknown): a file created with a
    /// mode the umask keeps needs no `fchmod` (issue 28: one system call less per file).
    private let umask: mode_t? = Staging.currentUmask()

    /// The umask, from /proc/self/status (reading it with umask(2) would change it meanwhile
    /// for every other thread).
    static func currentUmask() -> mode_t? {
        guard let status = try? readSmallFile("/proc/self/status", what: "process status", limit: 64 * 1024) else { return nil }
        for line in String(decoding: status, as: UTF8.self).split(separator: "\n") where line.hasPrefix("Umask:") {
            return mode_t(line.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8)
        }
        return nil
    }

    /// Gives `fd`, created by ``createFile(_:mode:)`` with `mode`, exactly that mode: a no-op
    /// where the umask left it so.
    func ensureMode(_ fd: Int32, _ mode: mode_t) throws {
        if let umask, mode & umask == 0 { return }
        _ = try systemCall("fchmod") { fchmod(fd, mode) }
    }

    init(besides destination: String) throws {
        let parentPath = AtomicFile.parentDirectory(of: destination)
        let parent: Int32
        do { parent = try Paths.open(parentPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC) } catch {
            throw SignetError.posix(error, "cannot open the directory of", path: destination)
        }
        var made: (path: String, name: String, token: Int)? = nil
        for _ in 0..<8 {
            let candidate = TemporaryFiles.name(besides: destination, tag: "staging")
            let token = TemporaryFiles.register(candidate, tree: true)
            let name = String(candidate.split(separator: "/").last!)
            let attempt: Result<Int32, SystemCallFailure>
            do {
                attempt = try TemporaryFiles.guardedCall("mkdirat") { mkdirat(parent, name, 0o700) }
            } catch {
                TemporaryFiles.unregister(token)
                close(parent)
                throw error
            }
            if case .success = attempt {
                made = (candidate, name, token)
                break
            }
            TemporaryFiles.unregister(token)
            if case .failure(let failure) = attempt, failure.code != EEXIST {
                close(parent)
                throw SignetError.posix(failure, "cannot create a staging directory beside", path: destination)
            }
        }
        guard let made else {
            close(parent)
            throw SignetError(.io, "cannot create a staging directory beside '\(destination)'", path: destination)
        }
        let root = openat(parent, made.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard root >= 0 else {
            let err = errno
            unlinkat(parent, made.name, AT_REMOVEDIR)
            TemporaryFiles.unregister(made.token)
            close(parent)
            throw SignetError.posix(err, "cannot open the staging directory", path: made.path, call: "openat")
        }
        self.path = made.path
        self.name = made.name
        self.token = made.token
        self.parent = parent
        self.root = root
    }

    deinit {
        for fd in directories.values { close(fd) }
        close(root)
        close(parent)
        TemporaryFiles.unregister(token)
        if let asideToken { TemporaryFiles.unregister(asideToken) }
    }

    /// The directory holding `relative` (created as needed, 0755 whatever the umask), as a descriptor.
    private func directory(for relative: String) throws -> (Int32, String) {
        var components = relative.split(separator: "/").map(String.init)
        let name = components.removeLast()
        var fd = root
        var walked = ""
        for component in components {
            walked += (walked.isEmpty ? "" : "/") + component
            if let known = directories[walked] {
                fd = known
                continue
            }
            let made = try TemporaryFiles.guardedCall("mkdirat") { mkdirat(fd, component, 0o755) }
            var created = false
            switch made {
            case .success: created = true
            case .failure(let failure) where failure.code == EEXIST: break
            case .failure(let failure):
                throw SignetError.posix(failure, "cannot create directory '\(walked)' in the staging directory", path: path)
            }
            let next = openat(fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard next >= 0 else {
                let reason = errno == ENOTDIR ? "'\(walked)' is both a file and a directory in this package" : String(cString: strerror(errno))
                throw SignetError(.malformedArchive, "cannot install: \(reason)", path: path, entry: relative)
            }
            // mkdir applies the umask; installed folders are 0755 regardless (FORMAT.md §2).
            if created { _ = fchmod(next, 0o755) }
            if directories.count > 256 {
                for old in directories.values { close(old) }
                directories.removeAll()
            }
            directories[walked] = next
            fd = next
        }
        return (fd, name)
    }

    /// Creates a new file (never an existing one, never through a link) and returns its
    /// descriptor, open for reading too (a reflinked copy is hashed through it).
    /// The staging tree is private (0700) until ``finish()``, so a file may be created with the
    /// mode it will have (then ``ensureMode(_:_:)``).
    func createFile(_ relative: String, mode: mode_t = 0o600) throws -> Int32 {
        let (directory, name) = try directory(for: relative)
        switch try TemporaryFiles.guardedCall("openat", { openat(directory, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode) }) {
        case .success(let fd): return fd
        case .failure(let failure) where failure.code == EEXIST || failure.code == EISDIR:
            throw SignetError(.malformedArchive, "cannot install '\(relative)': it is both a file and a directory in this package", path: path, entry: relative)
        case .failure(let failure):
            var error = SignetError.posix(failure, "cannot install '\(relative)' in the staging directory", path: path)
            error.entry = relative
            throw error
        }
    }

    /// Removes a staged file (a copy that turned out not to be the signed content).
    func removeFile(_ relative: String) {
        guard let (directory, name) = try? directory(for: relative) else { return }
        _ = unlinkat(directory, name, 0)
    }

    /// Writes a small file (signatures, manifest) with mode 0644.
    func writeFile(_ relative: String, _ bytes: [UInt8]) throws {
        let fd = try createFile(relative)
        defer { close(fd) }
        try bytes.withUnsafeBytes { try Installer.writeAll($0, to: fd, path: relative, destination: path) }
        do {
            _ = try systemCall("fchmod") { fchmod(fd, 0o644) }   // durable with the tree (finish())
        } catch {
            throw SignetError.posix(error, "cannot write '\(relative)' in the staging directory", path: path)
        }
    }

    /// Opens the tree to readers (0755) and makes all of it durable in one step, before it is
    /// renamed into place: every staged file's data, its attributes and mode, and every
    /// directory entry.
    ///
    /// One `syncfs` of the staging filesystem instead of an fsync per file (each of which
    /// commits ext4's journal): large files' writeback was started as they were written, small
    /// ones are written together here, and the disk is waited for once. It is as safe as the fsyncs were: syncfs writes back every dirty
    /// inode and page of the filesystem and waits for them and for the journal commit, and
    /// since Linux 5.8 it reports a writeback error that happened after `root` was opened
    /// (before the first file was written). It also writes other processes' dirty data on the
    /// same filesystem, which a busy device pays in time, never in safety. Measurements in
    /// bench/README.md.
    func finish() throws {
        do {
            _ = try systemCall("fchmod") { fchmod(root, 0o755) }
            _ = try systemCall("syncfs") { signet_syncfs(root) }
        } catch let failure as SystemCallFailure where failure.code == ENOSYS {
            // Only a seccomp filter hides syncfs (Linux has had it since 2.6.39): fall back
            // to one fsync per directory and file, reopened below the staging root.
            try fsyncTree()
        } catch {
            throw SignetError.posix(error, "cannot make the staged tree durable", path: path)
        }
    }

    /// The fallback of ``finish()``: fsync of every file and directory of the staged tree.
    private func fsyncTree() throws {
        func walk(_ fd: Int32) throws {
            try DirectoryEntries.forEach(in: fd) { entry in
                // Staged trees hold only what Signet made: files and directories.
                let child = try systemCall("openat") { openat(fd, entry.rawName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) }
                defer { close(child) }
                var info = stat()
                _ = try systemCall("fstat") { fstat(child, &info) }
                if info.st_mode & S_IFMT == S_IFDIR { try walk(child) }
                _ = try systemCall("fsync") { fsync(child) }
            }
        }
        do {
            try walk(root)
            _ = try systemCall("fsync") { fsync(root) }
        } catch {
            throw SignetError.posix(error, "cannot make the staged tree durable", path: path)
        }
    }

    /// Puts the staged tree at `destination`. An existing directory is swapped in one
    /// `renameat2(RENAME_EXCHANGE)` and the old tree then removed; where the filesystem lacks
    /// that, the old tree is moved aside first (DIR is then briefly absent). Returns whether the
    /// atomic exchange was used, and the old tree if it could not be removed.
    func install(at destination: String, replacing state: DestinationState) throws -> (exchanged: Bool, leftover: String?) {
        defer { _ = fsync(parent) }
        // The renames happen only if no interruption is removing the staging tree meanwhile.
        let old = try TemporaryFiles.guarded { try rename(to: destination, replacing: state) }
        guard let old else { return (false, nil) }
        // The old tree, at the staging path or aside (still registered: an interruption while
        // it is removed removes it too).
        return (old.exchanged, TreeRemover.removeEntry(Array(old.name.utf8CString), in: parent) ? nil : old.path)
    }

    /// The renames of ``install(at:replacing:)``; returns where the old tree went, if any.
    private func rename(to destination: String, replacing state: DestinationState) throws -> (name: String, path: String, exchanged: Bool)? {
        let target = destination.split(separator: "/").last.map(String.init) ?? destination
        if case .absent = state {
            if signet_renameat2(parent, name, parent, target, signet_RENAME_NOREPLACE()) == 0 {
                TemporaryFiles.unregister(token)
                return nil
            }
            let err = errno
            guard err == EINVAL || err == ENOSYS || err == ENOTSUP else {
                throw SignetError.posix(err, "cannot install at", path: destination, call: "renameat2")
            }
            // No RENAME_NOREPLACE here: under the destination's lock, nothing else creates DIR.
            var info = stat()
            do {
                _ = try systemCall("fstatat") { fstatat(parent, target, &info, AT_SYMLINK_NOFOLLOW) }
                throw SignetError.posix(EEXIST, "cannot install at", path: destination)
            } catch let failure as SystemCallFailure where failure.code == ENOENT {
                // Still absent: rename below.
            } catch {
                throw SignetError.posix(error, "cannot install at", path: destination)
            }
            guard renameat(parent, name, parent, target) == 0 else { throw SignetError.posix(errno, "cannot install at", path: destination, call: "renameat") }
            TemporaryFiles.unregister(token)
            return nil
        }
        if signet_renameat2(parent, name, parent, target, signet_RENAME_EXCHANGE()) == 0 {
            return (name, path, true)
        }
        let err = errno
        guard err == EINVAL || err == ENOSYS || err == ENOTSUP else {
            throw SignetError.posix(err, "cannot replace", path: destination, call: "renameat2")
        }
        let aside = TemporaryFiles.name(besides: destination, tag: "old")
        let asideName = String(aside.split(separator: "/").last!)
        asideToken = TemporaryFiles.register(aside, tree: true)
        guard renameat(parent, target, parent, asideName) == 0 else { throw SignetError.posix(errno, "cannot move the old tree aside at", path: destination, call: "renameat") }
        guard renameat(parent, name, parent, target) == 0 else {
            let err = errno
            renameat(parent, asideName, parent, target)
            throw SignetError.posix(err, "cannot install at", path: destination, call: "renameat")
        }
        TemporaryFiles.unregister(token)
        return (asideName, aside, false)
    }

    /// Removes the staging directory and everything in it. True when nothing is left.
    func remove() -> Bool {
        let removed = TreeRemover.removeEntry(Array(name.utf8CString), in: parent)
        if removed { TemporaryFiles.unregister(token) }
        return removed
    }
}
