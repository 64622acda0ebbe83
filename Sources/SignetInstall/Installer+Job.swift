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
import SignetArchive
import SignetPackage

extension Installer {
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
                if let manifest, let highest = recorded.sequences[manifest.name], manifest.sequence < highest, !options.allowDowngrade,
                    recorded.destination(destination)?.rolledBack(to: manifest.name, sequence: manifest.sequence) != true
                {
                    throw SignetError(
                        .rollback,
                        "\(manifest.name) sequence \(highest) was installed before (recorded in '\(stateFile)'); the package has sequence \(manifest.sequence), an older release. Refusing to roll back (--allow-downgrade overrides)",
                        path: package)
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
                if let manifest, Manifest.sameName(installed.name, manifest.name), manifest.sequence < installed.sequence, !options.allowDowngrade {
                    throw SignetError(
                        .rollback,
                        "'\(destination)' holds \(installed.name) sequence \(installed.sequence); the package has sequence \(manifest.sequence), an older release. Refusing to roll back (--allow-downgrade overrides)",
                        path: destination)
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
                throw SignetError(
                    .otherPackage,
                    "'\(destination)' holds package '\(name)' (\(origin)), installed from a signed manifest; the bare package '\(package)' has no name, no rollback and no completeness check, and does not replace it. Pass --change-package if '\(destination)' is meant to change product",
                    path: destination)
            }
            guard Manifest.sameName(name, manifest.name) else {
                throw SignetError(
                    .otherPackage,
                    "'\(destination)' holds package '\(name)' (\(origin)); '\(package)' is package '\(manifest.name)', another product. Refusing to replace one with the other; pass --change-package if '\(destination)' is meant to become '\(manifest.name)' (the change is recorded in --state)",
                    path: destination)
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
        func stage(
            _ file: Manifest.File, into staging: Staging, checked: PackageReader.Checked?, signer known: PublicKey?,
            progress: ProgressCounter? = nil,
            later: ((_ signature: [UInt8], _ digest: Digest) -> Void)? = nil
        ) throws -> (signer: PublicKey, attributesWritten: Bool, signature: [UInt8]) {
            let staged = try staging.createFile(file.path, mode: mode_t(file.mode.permissions))
            let fd = staged.descriptor
            let writer = StagedWriter(fd: fd, path: file.path, destination: destination)
            // A structured resource's signed copy under .signet/structured/, written from the
            // same verified stream (re-verification compares the resource with it key by key).
            let copyPath = file.structured != nil && checked != nil ? TreeLayout.structuredCopy(of: file.path) : nil
            var stagedCopy: OwnedDescriptor? = nil
            if let copyPath { stagedCopy = try staging.createFile(copyPath, mode: 0o644) }
            let copyFD = stagedCopy?.descriptor
            let copy = copyFD.map { StagedWriter(fd: $0, path: copyPath!, destination: destination) }
            let signature: [UInt8]
            let sha256: String
            let signer: PublicKey
            if let checked {
                switch try PackageReader.checkResource(
                    file, reader: reader, layout: layout, checked: checked,
                    sink: { chunk in
                        try writer.write(chunk)
                        try copy?.write(chunk)
                        progress?.add(bytes: chunk.count)
                    }, later: later)
                {
                case .verified(let verified): signature = verified
                case .rejected(let failure, let message, let entry): throw error(for: failure, message, package: package, entry: entry)
                }
                sha256 = file.sha256
                signer = checked.key
            } else {
                let (digest, sig, key) = try BarePackage.verifyFile(
                    file.path, reader: reader, layout: layout, policy: policy,
                    algorithm: options.bareAlgorithm, limits: options.limits, package: package
                ) {
                    try writer.write($0)
                    progress?.add(bytes: $0.count)
                }
                (sha256, signature, signer) = (digest, sig, known ?? key)
            }
            return try finishStaged(
                file, fd: fd, writer: writer, copy: copyFD.map { ($0, copy!) }, signature: signature, sha256: sha256,
                signer: signer, checked: checked, into: staging)
        }

        /// The end of staging one resource, whichever way its bytes came (fetched, copied from
        /// the installed tree, or left by an earlier run): its signature attributes, its mode
        /// (set whatever the umask, with `exactMode`: a file an earlier run made may have had
        /// another), writeback started (made durable with the whole tree by
        /// ``Staging/finish()``), and the sidecar signature FORMAT.md §3 asks for where there are
        /// no user attributes, and beside a bare package's files (which have no signature record).
        func finishStaged(
            _ file: Manifest.File, fd: FileDescriptor, writer: StagedWriter, copy: (fd: FileDescriptor, writer: StagedWriter)?,
            signature: [UInt8], sha256: String, signer: PublicKey, checked: PackageReader.Checked?, into staging: Staging,
            exactMode: Bool = false
        ) throws -> Staged {
            let algorithm = checked?.algorithm ?? options.bareAlgorithm
            let attributesWritten = try setAttributes(
                fd, file.path, signature: signature, sha256: sha256, signer: signer, manifest: checked?.manifest, algorithm: algorithm)
            do {
                let mode = mode_t(file.mode.permissions)
                if exactMode { _ = try systemCall("fchmod") { fchmod(fd.rawValue, mode) } } else { try staging.ensureMode(fd, mode) }
                if let copy { try staging.ensureMode(copy.fd, 0o644) }
                writer.finish()
                copy?.writer.finish()
            } catch {
                throw SignetError.posix(error, "cannot finish the staged copy of '\(file.path)' beside", path: destination)
            }
            if !attributesWritten || checked == nil {
                try staging.writeFile(TreeLayout.signature(of: file.path), signature)
            }
            return (signer, attributesWritten, signature)
        }

        /// `user.signet.sig`, `user.signet.meta` and, if asked, the IMA attribute. False when
        /// the filesystem has no user attributes (the sidecar then carries the signature).
        func setAttributes(
            _ fd: FileDescriptor, _ path: String, signature: [UInt8], sha256: String, signer: PublicKey,
            manifest: Manifest?, algorithm: SignatureAlgorithm
        ) throws -> Bool {
            var written = true
            switch ExtendedAttributes.set(ExtendedAttributes.signature, signature, on: fd) {
            case .success:
                let meta = try SignetMetadata.encode(
                    path: path, sha256: sha256, signer: signer, manifest: manifest, algorithm: algorithm, source: options.source)
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
                throw SignetError(
                    .usage, "IMA signatures are RSA PKCS#1 v1.5; this package is signed with \(algorithm.id), so --ima cannot be used", path: package)
            }
            if case .failure(let failure) = ExtendedAttributes.set(imaAttribute, ima.bytes, on: fd) {
                if failure.code == EPERM {
                    throw SignetError(
                        .permissionDenied,
                        "cannot write \(imaAttribute) on '\(path)': security.* attributes need root (CAP_SYS_ADMIN); run as root or use --ima user",
                        path: destination)
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
                Verifier.check(signature, digest: digest, key: checked.key, algorithm: checked.algorithm)
            else {
                throw SignetError(
                    .badSignature,
                    "'\(package)' does not verify: \(TreeLayout.signatureRecordSignature), the signature over its per-file signatures, does not verify with the manifest's key (a signature entry was replaced, or the package was altered); nothing was installed",
                    path: package, entry: TreeLayout.signatureRecordSignature)
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
}
