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

/// Checks one listed file of an installed tree (thread-safe: one instance serves all workers).
final class TreeChecker: @unchecked Sendable {
    // The tree's descriptor (a copy of the caller's) is opened once and only read (openat) by the workers.
    let root: String
    private let rootCopy: OwnedDescriptor
    private var rootDescriptor: FileDescriptor { rootCopy.descriptor }
    let manifest: Manifest
    let key: PublicKey
    let algorithm: SignatureAlgorithm
    let repair: Bool
    /// The tree's `.signet/signatures`, if it has one that fits the manifest.
    let record: SignatureRecord.Reader?
    let sawUnsupported = CancellationFlag()
    /// Key paths allowed to change, by the bytes of the structured resource's path (a rule for
    /// `Key.json` must not apply to its canonically equivalent twin `\u{212A}ey.json`).
    let allowedKeys: [[UInt8]: [KeyPath]]
    /// Other keys whose `user.signet.sig` a file shared from an earlier release may keep
    /// (`TrustPolicy.peerKeys`; FORMAT.md §3, "Files shared across keys").
    let peers: [PublicKey]
    /// Read fs-verity files too instead of measuring them (`reverify --read-all`).
    let readVerityFiles: Bool

    init(
        root: String, descriptor: FileDescriptor, manifest: Manifest, key: PublicKey, algorithm: SignatureAlgorithm, repair: Bool,
        record: SignatureRecord.Reader? = nil, allowedKeys: [String: [KeyPath]] = [:], peers: [PublicKey] = [], readVerityFiles: Bool = false
    ) throws {
        self.readVerityFiles = readVerityFiles
        self.record = record
        self.peers = peers
        self.allowedKeys = Dictionary(allowedKeys.map { (Array($0.key.utf8), $0.value) }, uniquingKeysWith: +)
        self.root = root
        do { rootCopy = OwnedDescriptor(adopting: try systemCall("dup") { dup(descriptor.rawValue) }) } catch {
            throw SignetError.posix(error, "cannot open the installed tree", path: root)
        }
        self.manifest = manifest
        self.key = key
        self.algorithm = algorithm
        self.repair = repair
    }

    /// What one worker thread reuses from file to file: a read buffer and hashing contexts.
    final class Workspace {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: InputFile.chunkSize, alignment: 64)
        private var hashers: [Digest.Hasher] = []
        private var hashing: DigestAlgorithm?
        let window = SignatureRecord.Reader.Window()

        deinit { buffer.deallocate() }

        /// SHA-256 (what the manifest lists) and, when the signatures use another, that one too;
        /// restarted for a new file.
        func hashers(for algorithm: DigestAlgorithm) throws -> [Digest.Hasher] {
            if hashing == algorithm {
                for hasher in hashers { try hasher.restart() }
            } else {
                hashers = try (algorithm == .sha256 ? [DigestAlgorithm.sha256] : [.sha256, algorithm]).map { try Digest.Hasher($0) }
                hashing = algorithm
            }
            return hashers
        }
    }

    /// Checks file number `position` of the manifest.
    func check(_ file: Manifest.File, at position: Int, in workspace: Workspace) -> FileReport {
        func report(_ verdict: FileVerdict, _ detail: String, _ source: SignatureSource? = nil) -> FileReport {
            FileReport(path: file.path, verdict: verdict, detail: detail, signatureSource: source, signer: verdict.isOK ? key.keyID : nil)
        }
        // Not fstat'ed on the way to a match: a read that stops short at exactly the signed size is
        // a regular file's end, and a matching file then shows user.signet.sig, which only regular
        // files and directories can carry (and a directory cannot be read). Every other outcome
        // asks fstat what the file is before it is reported.
        func differs() -> FileReport {
            guard let info = try? fd.status(), info.st_mode & S_IFMT == S_IFREG else { return report(.modified, Self.notRegular(file.path)) }
            if let format = file.structured { return compareKeys(fd, file, format: format, at: position, in: workspace) }
            let size = UInt64(clamping: info.st_size)
            return report(
                .modified,
                "'\(file.path)' differs from the signed manifest (\(size == file.size ? "same size, other content" : "\(size) bytes, not \(file.size)"))")
        }
        let opened: OwnedDescriptor
        do { opened = try openBeneath(file.path) } catch { return report(error.verdict, error.detail) }
        let fd = opened.descriptor
        // An fs-verity file whose digest, measured by the kernel, is the one the signed manifest
        // records: its content is the signed content, unread — the kernel checks each
        // block against that digest's Merkle tree whenever it is read (a block changed under the
        // file reads as EIO, which `--read-all` finds). Signatures over SHA-256 only: the digest
        // they are over is then the manifest's.
        if !readVerityFiles, let verity = file.verity, algorithm.digest == .sha256,
            case .digest(let measured) = VerityFile.measure(fd), verity.matches(bytes: measured),
            let sha256 = file.content.bytes, let digest = Digest(algorithm: .sha256, bytes: sha256)
        {
            return modeCheck(
                fd, file,
                attributeCheck(
                    fd, file, at: position, in: workspace, digest: digest,
                    note: "its fs-verity digest, measured by the kernel, is the signed one"))
        }
        // The content against the signed manifest, through this descriptor: at most one byte more
        // than the signed size is read (a longer file differs; its length is for fstat to tell).
        let digests: [Digest]
        let size: UInt64
        do {
            let hashers = try workspace.hashers(for: algorithm.digest)
            let limit = file.size == .max ? file.size : file.size + 1
            var count: UInt64 = 0
            while count < limit {
                let wanted = Int(min(UInt64(workspace.buffer.count), limit - count))
                let read = try fd.readChunk(into: UnsafeMutableRawBufferPointer(rebasing: workspace.buffer[0..<wanted]))
                if read == 0 { break }
                count += UInt64(read)
                if count > file.size { break }
                hashers.forEach { $0.update(UnsafeRawBufferPointer(rebasing: workspace.buffer[0..<read])) }
                // A short read of a regular file is its end: the read that would return 0 is
                // saved (one per file). Anything else that stops short is caught below.
                if read < wanted && count == file.size { break }
            }
            digests = try hashers.map { try $0.finalize() }
            size = count
        } catch let failure as SystemCallFailure {
            if !Self.isRegularFile(fd) { return report(.modified, Self.notRegular(file.path)) }
            if failure.code == EIO, file.verity != nil, case .digest = VerityFile.measure(fd) {
                return report(
                    .modified,
                    "'\(file.path)' is an fs-verity file and a block of it no longer matches its Merkle tree: the kernel refuses to read it (EIO); its data was changed under the file (on the device)"
                )
            }
            return report(.unreadable, SignetError.posix(failure, "cannot read", path: root + "/" + file.path).reason)
        } catch {
            return report(.unreadable, (error as? SignetError)?.reason ?? "\(error)")
        }
        guard size == file.size, file.content.matches(digests[0]) else { return modeCheck(fd, file, differs()) }
        return modeCheck(fd, file, attributeCheck(fd, file, at: position, in: workspace, digest: digests.last!))
    }

    /// A file whose content and signature are right must also have the manifest's mode (the
    /// permission bits and no set-id or sticky bit): otherwise `mode-changed`, or with
    /// `--repair` the recorded mode is restored (fchmod on the checked descriptor) and the file
    /// is `repaired`. Other verdicts pass through.
    private func modeCheck(_ fd: FileDescriptor, _ file: Manifest.File, _ made: FileReport) -> FileReport {
        guard made.verdict.isOK else { return made }
        guard let info = try? fd.status() else { return made }
        let mode = UInt32(info.st_mode) & 0o7777
        guard mode != file.mode.permissions else { return made }
        let found = String(mode, radix: 8), wanted = file.mode.rawValue
        func report(_ verdict: FileVerdict, _ detail: String) -> FileReport {
            var changed = FileReport(
                path: file.path, verdict: verdict, detail: detail, signatureSource: made.signatureSource, signer: verdict.isOK ? key.keyID : nil)
            changed.changedKeys = made.changedKeys
            return changed
        }
        guard repair else {
            return report(.modeChanged, "'\(file.path)' has mode \(found), not the signed manifest's \(wanted); --repair restores it")
        }
        guard fchmod(fd.rawValue, mode_t(file.mode.permissions)) == 0 else {
            return report(.modeChanged, "'\(file.path)' has mode \(found), not \(wanted), and cannot be restored: \(String(cString: strerror(errno)))")
        }
        return report(.repaired, "'\(file.path)' had mode \(found); restored to the signed manifest's \(wanted)")
    }

    /// The verdict on the signature attributes of a file whose content is the signed one
    /// (`digest`, in the signature's algorithm): the attribute unpack installed, another valid
    /// signature, or lost (restored with --repair). `note` and `changes` describe a structured
    /// file whose allowed keys changed.
    private func attributeCheck(
        _ fd: FileDescriptor, _ file: Manifest.File, at position: Int, in workspace: Workspace, digest: Digest,
        note: String? = nil, changes: [KeyChange] = []
    ) -> FileReport {
        func report(_ verdict: FileVerdict, _ detail: String, _ source: SignatureSource? = nil) -> FileReport {
            var made = FileReport(
                path: file.path, verdict: verdict, detail: note.map { "\($0); \(detail)" } ?? detail, signatureSource: source,
                signer: verdict.isOK ? key.keyID : nil)
            made.changedKeys = changes
            return made
        }
        func annotated(_ made: FileReport) -> FileReport {
            var made = FileReport(
                path: made.path, verdict: made.verdict, detail: note.map { "\($0); \(made.detail)" } ?? made.detail, signatureSource: made.signatureSource,
                signer: made.signer)
            made.changedKeys = changes
            return made
        }
        // The key is the one the manifest verified with: a signature is valid when it is by that
        // key over this content (no policy to consult per file, no message to build).
        func verifies(_ signature: [UInt8]) -> Bool {
            signature.count == self.key.signatureLength && Verifier.check(signature, digest: digest, key: self.key, algorithm: self.algorithm)
        }
        // The tree's own copy of the signature (the record, else a sidecar file) is read only
        // when the attribute cannot vouch for the file: nil when it is absent, not a file or not
        // a signature of this content; a read error is an error, never taken for an absent sidecar.
        var validSidecar: Result<(bytes: [UInt8], source: SignatureSource)?, SignetError> {
            if let recorded = record?.signature(at: position), verifies(recorded) { return .success((recorded, .record)) }
            do {
                guard
                    let bytes = try InputFile.readBeneath(
                        rootDescriptor, TreeLayout.signature(of: file.path), rootPath: root, what: "sidecar signature", limit: 64 * 1024)
                else { return .success(nil) }
                return .success(verifies(bytes) ? (bytes, .sidecar) : nil)
            } catch let error as SignetError where error.code == .malformedInput {
                return .success(nil)
            } catch {
                return .failure(SignetError.posix(error, "cannot read the sidecar signature of", path: root + "/" + file.path))
            }
        }
        let attribute = ExtendedAttributes.get(ExtendedAttributes.signature, on: fd)
        // Without the attribute, the file may not be a regular file at all (an empty FIFO or
        // device reads as an empty file); the check above did not fstat it.
        if case .success(.some) = attribute {
        } else if !Self.isRegularFile(fd) {
            return report(.modified, Self.notRegular(file.path))
        }
        switch attribute {
        case .success(let attribute?):
            // The signature unpack installed, over content that matches the signed manifest.
            if let record, record.matches(attribute, at: position, through: workspace.window) {
                return report(
                    .ok,
                    note == nil
                        ? "matches the signed manifest; user.signet.sig is the signature unpack installed"
                        : "user.signet.sig is the signature unpack installed", .xattr)
            }
            if verifies(attribute) {
                return report(.ok, "verified", .xattr)
            }
            // A file shared from a release signed by another key this policy accepts for the
            // package: its attribute is that key's signature over this content, and the tree's
            // own record (or sidecar) holds this manifest key's, which must verify too.
            if let peer = peers.first(where: {
                attribute.count == $0.signatureLength && Verifier.check(attribute, digest: digest, key: $0, algorithm: algorithm)
            }),
                case .success(let own?) = validSidecar
            {
                var made = FileReport(
                    path: file.path, verdict: .ok,
                    detail: (note.map { "\($0); " } ?? "")
                        + "verified: user.signet.sig is by key \(peer.keyID.short), which the trust policy also accepts for this package (the release that wrote these bytes); \(own.source == .record ? "the tree's record" : "the sidecar") holds \(key.keyID.short)'s signature",
                    signatureSource: .xattr, signer: peer.keyID)
                made.changedKeys = changes
                return made
            }
            // Shared from a release whose key this trust no longer accepts (rotated out or
            // revoked since): the attribute cannot be checked, and the tree's record, signed
            // with the manifest's key, vouches for the file (its content matched the manifest
            // above). Only where user.signet.meta names that other key: an attribute damaged
            // under the manifest's own key is still attributes-lost.
            if let meta = SignetMetadata(fd), let other = meta.keyID, other != key.keyID, !peers.contains(where: { $0.keyID == other }),
                case .success(let own?) = validSidecar, own.source == .record
            {
                var made = FileReport(
                    path: file.path, verdict: .ok,
                    detail: (note.map { "\($0); " } ?? "")
                        + "verified from the tree's record: its user.signet.sig is by key \(other.short) (the release that wrote these bytes), which the trust policy no longer accepts; the next update that installs the file gives it \(key.keyID.short)'s signature",
                    signatureSource: .record, signer: key.keyID)
                made.changedKeys = changes
                return made
            }
            return annotated(
                restore(
                    fd, file, sidecar: validSidecar,
                    lost: "its user.signet.sig does not verify (replaced by another signature, truncated or extended)"))
        case .success(nil):
            for name in [IMASignature.userAttribute, IMASignature.securityAttribute] {
                if case .success(let bytes?) = ExtendedAttributes.get(name, on: fd), let ima = IMASignature(bytes: bytes),
                    ima.signatureAlgorithm == algorithm, verifies(ima.signature)
                {
                    return report(.ok, "verified from \(name)", .ima)
                }
            }
            return annotated(restore(fd, file, sidecar: validSidecar, lost: "its user.signet.sig attribute is gone"))
        case .failure(let failure) where failure.isUnsupported:
            sawUnsupported.set()
            switch validSidecar {
            case .success(let found?):
                return report(
                    .ok,
                    "verified from \(found.source == .record ? "the tree's record .signet/signatures" : "the sidecar") (no user xattrs on this filesystem)",
                    found.source)
            case .success(nil): return report(.unsigned, "no user xattrs on this filesystem and no valid sidecar \(TreeLayout.signature(of: file.path))")
            case .failure(let error): return report(.unreadable, error.reason)
            }
        case .failure(let failure):
            return report(.unreadable, failure.error("read", attribute: ExtendedAttributes.signature, path: file.path).reason)
        }
    }

    /// The signed content of a structured resource: the tree's copy under `.signet/structured/`,
    /// parsed, once its size and SHA-256 are the manifest's; with the digests of the copy in
    /// `algorithms` when asked. A failure is a sentence for the report.
    static func signedContent(
        of file: Manifest.File, format: StructuredFormat, rootFD: FileDescriptor, root: String,
        digest algorithm: DigestAlgorithm = .sha256
    ) -> Result<StructuredDocument, StructuredFailure> {
        signedCopy(of: file, format: format, rootFD: rootFD, root: root, digest: algorithm).map(\.value)
    }

    /// Why a structured comparison could not be made, for the report.
    struct StructuredFailure: Error {
        let reason: String
    }

    private static func signedCopy(
        of file: Manifest.File, format: StructuredFormat, rootFD: FileDescriptor, root: String,
        digest algorithm: DigestAlgorithm
    ) -> Result<(value: StructuredDocument, digest: Digest), StructuredFailure> {
        let relative = TreeLayout.structuredCopy(of: file.path)
        let bytes: [UInt8]
        do {
            guard let read = try InputFile.readBeneath(rootFD, relative, rootPath: root, what: "signed copy", limit: StructuredFormat.maximumSize) else {
                return .failure(
                    .init(
                        reason:
                            "the tree has no signed copy (\(relative)) to compare its keys with; it was installed by a Signet without structured resources, or the copy was removed"
                    ))
            }
            bytes = read
        } catch {
            return .failure(.init(reason: "its signed copy \(relative) cannot be read: \((error as? SignetError)?.reason ?? "\(error)")"))
        }
        guard UInt64(bytes.count) == file.size, let sha256 = try? Digest.compute(bytes, algorithm: .sha256), file.content.matches(sha256) else {
            return .failure(.init(reason: "its signed copy \(relative) does not match the signed manifest (it was altered), so its keys cannot be compared"))
        }
        guard let digest = algorithm == .sha256 ? sha256 : try? Digest.compute(bytes, algorithm: algorithm) else {
            return .failure(.init(reason: "its signed copy \(relative) cannot be hashed"))
        }
        do {
            return .success((try format.parse(bytes), digest))
        } catch {
            return .failure(.init(reason: "its signed copy does not parse as \(format.rawValue): \(error)"))
        }
    }

    /// A structured resource whose bytes differ from the signed ones, compared key by key with
    /// the tree's signed copy: `ok` (with a note) when only allowed keys differ, else `modified`
    /// listing every changed, added and removed key path.
    private func compareKeys(_ fd: FileDescriptor, _ file: Manifest.File, format: StructuredFormat, at position: Int, in workspace: Workspace) -> FileReport {
        func modified(_ detail: String, _ changes: [KeyChange] = []) -> FileReport {
            var made = FileReport(
                path: file.path, verdict: .modified, detail: "'\(file.path)' differs from the signed manifest; \(detail)", signatureSource: nil, signer: nil)
            made.changedKeys = changes
            return made
        }
        let signed: (value: StructuredDocument, digest: Digest)
        switch Self.signedCopy(of: file, format: format, rootFD: rootDescriptor, root: root, digest: algorithm.digest) {
        case .success(let copy): signed = copy
        case .failure(let failure): return modified(failure.reason)
        }
        // The file as it is now, through the descriptor that was checked (at most the limit).
        var bytes: [UInt8] = []
        // Its size now, reserved at once: grown by appending, the buffer would reach twice the
        // document (reverify's peak on a 16 MiB file).
        if let info = try? fd.status(), info.st_size > 0 { bytes.reserveCapacity(min(StructuredFormat.maximumSize, Int(info.st_size))) }
        do {
            var offset: Int64 = 0
            while true {
                let read = try fd.read(fullyAt: offset, into: workspace.buffer)
                if read == 0 { break }
                guard bytes.count + read <= StructuredFormat.maximumSize else {
                    return modified("it is now larger than the \(StructuredFormat.maximumSize) bytes a structured file is compared key by key up to")
                }
                bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: workspace.buffer[0..<read]))
                offset += Int64(read)
            }
        } catch {
            return FileReport(
                path: file.path, verdict: .unreadable, detail: SignetError.posix(error, "cannot read", path: root + "/" + file.path).reason,
                signatureSource: nil, signer: nil)
        }
        let current: StructuredDocument
        do { current = try format.parse(bytes) } catch {
            return modified("it no longer parses as \(format.rawValue): \(error)")
        }
        bytes = [] // the parsed form holds what is compared
        let changes = StructuredDocument.changes(from: signed.value, to: current, allowed: allowedKeys[Array(file.path.utf8)] ?? [])
        let refused = changes.filter { !$0.allowed }
        guard refused.isEmpty else {
            return modified("keys changed: \(refused.map(\.description).joined(separator: ", "))", changes)
        }
        let note =
            changes.isEmpty
            ? "'\(file.path)' holds the same keys and values as signed, formatted otherwise"
            : "keys-changed: \(changes.map(\.path.description).joined(separator: ", ")) (allowed); every other key of '\(file.path)' is as signed"
        return attributeCheck(fd, file, at: position, in: workspace, digest: signed.digest, note: note, changes: changes)
    }

    /// The content is right but the attribute is not: repair it from a verified sidecar if asked.
    private func restore(
        _ fd: FileDescriptor, _ file: Manifest.File, sidecar read: Result<(bytes: [UInt8], source: SignatureSource)?, SignetError>, lost: String
    ) -> FileReport {
        let found: (bytes: [UInt8], source: SignatureSource)?
        switch read {
        case .success(let copy): found = copy
        case .failure(let error):
            return FileReport(path: file.path, verdict: .unreadable, detail: "'\(file.path)': \(lost), and \(error.reason)", signatureSource: nil, signer: nil)
        }
        guard let found else {
            return FileReport(
                path: file.path, verdict: .unsigned,
                detail:
                    "'\(file.path)': \(lost), and the tree has no valid copy of its signature (.signet/signatures or \(TreeLayout.signature(of: file.path))) to restore it from",
                signatureSource: nil, signer: nil)
        }
        let sidecar = found.bytes
        let copy = found.source == .record ? TreeLayout.signatureRecord : TreeLayout.signature(of: file.path)
        guard repair else {
            return FileReport(
                path: file.path, verdict: .attributesLost, detail: "'\(file.path)' matches the signed manifest but \(lost); --repair restores it from \(copy)",
                signatureSource: found.source, signer: nil)
        }
        let meta: [UInt8]
        do { meta = try SignetMetadata.encode(path: file.path, sha256: file.sha256, signer: key, manifest: manifest, algorithm: algorithm) } catch {
            return FileReport(
                path: file.path, verdict: .attributesLost, detail: (error as? SignetError)?.reason ?? "\(error)", signatureSource: found.source, signer: nil)
        }
        if case .failure(let failure) = ExtendedAttributes.set(ExtendedAttributes.signature, sidecar, on: fd) {
            return FileReport(
                path: file.path, verdict: .attributesLost, detail: failure.error("restore", attribute: ExtendedAttributes.signature, path: file.path).reason,
                signatureSource: found.source, signer: nil)
        }
        _ = ExtendedAttributes.set(ExtendedAttributes.metadata, meta, on: fd)
        return FileReport(
            path: file.path, verdict: .repaired, detail: "'\(file.path)': \(lost); restored from \(copy) after checking the content",
            signatureSource: found.source, signer: key.keyID)
    }

    /// Why a listed file could not be opened, as a verdict.
    struct OpenRefusal: Error {
        let verdict: FileVerdict
        let detail: String
        init(_ verdict: FileVerdict, _ detail: String) {
            self.verdict = verdict
            self.detail = detail
        }
    }

    /// The opened file and its size.
    private func openBeneath(_ relative: String) throws(OpenRefusal) -> OwnedDescriptor {
        func refusal(_ err: Int32) -> OpenRefusal {
            switch err {
            case ENOENT: OpenRefusal(.missing, "'\(relative)' is in the signed manifest but not on disk")
            case ELOOP, ENOTDIR, EXDEV:
                OpenRefusal(.modified, "'\(relative)' (or a directory on its path) was replaced by a symbolic link or another kind of file")
            default: OpenRefusal(.unreadable, "cannot open '\(relative)': \(String(cString: strerror(err)))")
            }
        }
        do { return try Paths.open(relative, beneath: rootDescriptor) } catch { throw refusal(error.code) }
    }

    private static func isRegularFile(_ fd: FileDescriptor) -> Bool {
        guard let info = try? fd.status() else { return false }
        return info.st_mode & S_IFMT == S_IFREG
    }

    private static func notRegular(_ path: String) -> String { "'\(path)' is no longer a regular file" }
}
