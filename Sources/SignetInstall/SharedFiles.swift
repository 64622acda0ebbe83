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

/// The installed tree as the source of the files a new release leaves unchanged:
/// a resource whose path, size and SHA-256 equal an entry of the installed manifest is shared
/// with the installed tree (a hard link: nothing written) when its attributes and mode are the
/// new release's too, else copied from it (a reflink where the filesystem has them), and is
/// fetched or unpacked from the package only when neither proves the signed content.
final class SharedTree {
    /// The installed tree's root.
    let root: SharedDescriptor
    private var installed: [String: (size: UInt64, sha256: String)] = [:]
    /// Files shared (hard-linked) and copied from the installed tree.
    private(set) var linked = 0
    private(set) var copied = 0
    /// With `--repair`: the files its check found wrong, which are read whole here rather than
    /// measured (the check read every other fs-verity file whole and found it intact).
    var damaged: Set<String> = []

    /// Nil when `state` is not a tree installed from a signed manifest, or it cannot be opened.
    init?(destination: String, state: DestinationState) {
        guard case .installed(let manifest?) = state,
            let opened = try? Paths.open(destination, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        else { return nil }
        root = SharedDescriptor(opened)
        installed.reserveCapacity(manifest.files.count)
        for file in manifest.files { installed[file.path] = (file.size, file.sha256) }
    }

    /// Whether the installed manifest lists `file` with the same size and content.
    func holds(_ file: Manifest.File) -> Bool {
        guard !file.sha256.isEmpty, let old = installed[file.path] else { return false }
        return old.size == file.size && old.sha256 == file.sha256
    }

    /// Stages `file` from the installed tree: shared if it can be, else copied; nil when the
    /// installed file is not the signed content (it is then read from the package).
    func stage(
        _ file: Manifest.File, job: Installer.Job, into staging: Staging, checked: PackageReader.Checked,
        later: ((_ signature: [UInt8], _ digest: Digest) -> Void)?,
        ownSignature: @escaping (_ file: FileDescriptor, _ digest: Digest) -> [UInt8]? = { _, _ in nil }
    ) throws -> Installer.Job.Staged? {
        if let shared = try job.stageShared(
            file, from: root.descriptor, into: staging, checked: checked, later: later, ownSignature: ownSignature,
            mayMeasure: !damaged.contains(file.path))
        {
            linked += 1
            return shared
        }
        if let copy = try job.stageCopy(file, from: root.descriptor, into: staging, checked: checked, later: later, ownSignature: ownSignature) {
            copied += 1
            return copy
        }
        return nil
    }
}

extension Installer.Job {
    /// Stages `file` as a hard link to the installed file below `root`, when that inode is
    /// exactly what the new release installs: a regular file of ours, with the new release's
    /// mode, its content hashed here to the manifest's SHA-256, a `user.signet.sig` that
    /// verifies over it with the key `user.signet.meta` names (the manifest's, or another the
    /// trust policy accepts for this package: `checked.peers`), `user.signet.meta` naming the
    /// same package, path and algorithm, and the IMA attribute this install asks for (none if none).
    /// `user.signet.meta` keeps the sequence of the release that wrote the content (FORMAT.md
    /// §3). The package's signature entry still goes into the tree's record and is verified as
    /// for any resource. Nil, with nothing staged, otherwise; structured resources (which have
    /// a signed copy beside them) are always copied.
    /// `mayMeasure`: an fs-verity file may be taken as the signed content on the kernel's
    /// measurement alone (`verityContent`); by default not under
    /// `--repair`, which must read what it repairs.
    func stageShared(
        _ file: Manifest.File, from root: FileDescriptor, into staging: Staging, checked: PackageReader.Checked,
        later: ((_ signature: [UInt8], _ digest: Digest) -> Void)?,
        ownSignature: (_ file: FileDescriptor, _ digest: Digest) -> [UInt8]?, mayMeasure: Bool? = nil
    ) throws -> Staged? {
        guard file.structured == nil, !options.force else { return nil }
        var components = file.path.split(separator: "/").map(String.init)
        guard let name = components.popLast() else { return nil }
        let parentPath = components.joined(separator: "/")
        if parentPath.isEmpty {
            return try stageShared(
                file, parent: root, name: name, into: staging, checked: checked, later: later, ownSignature: ownSignature,
                mayMeasure: mayMeasure ?? !options.repair)
        }
        guard let parent = try? Paths.open(parentPath, beneath: root, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) else { return nil }
        return try stageShared(
            file, parent: parent.descriptor, name: name, into: staging, checked: checked, later: later, ownSignature: ownSignature,
            mayMeasure: mayMeasure ?? !options.repair)
    }

    private func stageShared(
        _ file: Manifest.File, parent: FileDescriptor, name: String, into staging: Staging, checked: PackageReader.Checked,
        later: ((_ signature: [UInt8], _ digest: Digest) -> Void)?,
        ownSignature: (_ file: FileDescriptor, _ digest: Digest) -> [UInt8]?, mayMeasure: Bool
    ) throws -> Staged? {
        let raw = openat(parent.rawValue, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC)
        guard raw >= 0, let input = try? InputFile.adopt(OwnedDescriptor(adopting: raw), path: destination + "/" + file.path, what: "installed file") else {
            return nil
        }
        let fd = input.descriptor
        // The inode keeps the signature of the release that wrote it: by this manifest's key, or
        // by another key the trust policy accepts for this package (`checked.peers`).
        guard let info = try? fd.status(), info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(),
            info.st_mode & 0o7777 == mode_t(file.mode.permissions), UInt64(info.st_size) == file.size,
            case .success(let attribute?) = ExtendedAttributes.get(ExtendedAttributes.signature, on: fd),
            let meta = SignetMetadata(fd), meta.name.map({ Manifest.sameName($0, checked.manifest.name) }) == true,
            meta.path == file.path, meta.algorithm == checked.algorithm,
            let signer = meta.keyID == checked.key.keyID ? checked.key : checked.peers.first(where: { $0.keyID == meta.keyID }),
            attribute.count == signer.signatureLength,
            imaMatches(fd, signature: attribute, key: signer, checked: checked)
        else { return nil }
        let digest: Digest
        if mayMeasure, let measured = Self.verityContent(file, fd, algorithm: checked.algorithm) {
            // An fs-verity file whose kernel-measured digest is the signed one: its content is
            // the signed content, unread (the kernel checks its blocks whenever they are read).
            digest = measured
        } else {
            let hashers = try ContentHashers(for: file, algorithm: checked.algorithm)
            struct Longer: Error {}
            var total: UInt64 = 0
            do {
                try input.forEachChunk { chunk in
                    total += UInt64(chunk.count)
                    guard total <= file.size else { throw Longer() }
                    try hashers.update(chunk)
                }
            } catch is Longer {
                return nil
            } catch let error as SignetError where error.path == input.path {
                return nil
            }
            // Not the signed content (or a wrong fs-verity digest, which the package's entry
            // then names when it is streamed instead): not shared.
            guard total == file.size, case .signed(let signed) = try hashers.finish() else { return nil }
            digest = signed
        }
        guard Verifier.check(attribute, digest: digest, key: signer, algorithm: checked.algorithm),
            staging.link(file.path, from: parent, name: name, identity: info)
        else { return nil }
        // The package's signature of the file, for the tree's record (verified like any).
        do {
            return (checked.key, true, try reusedSignature(file, own: ownSignature(fd, digest), digest: digest, checked: checked, later: later))
        } catch {
            staging.removeFile(file.path)
            throw error
        }
    }

    /// The signature a file taken from the installed tree gets in the new tree's record: its
    /// own (`own`, already verified with the manifest's key over `digest`), else the package's
    /// entry, verified now or handed to `later` (the batched checks).
    func reusedSignature(
        _ file: Manifest.File, own: [UInt8]?, digest: Digest, checked: PackageReader.Checked,
        later: ((_ signature: [UInt8], _ digest: Digest) -> Void)?
    ) throws -> [UInt8] {
        if let own { return own }
        let signature = try reader.readAll(layout.signature(file.path)!, limit: 64 * 1024, name: TreeLayout.signature(of: file.path))
        if let later {
            later(signature, digest)
        } else if case .rejected(let failure, let message, let entry) = PackageReader.signatureCheck(
            file, signature: signature, digest: digest,
            key: checked.key, algorithm: checked.algorithm)
        {
            throw Installer.error(for: failure, message, package: package, entry: entry)
        }
        return signature
    }

    /// The SHA-256 the signatures are over, when `fd` is an fs-verity file whose digest the
    /// kernel measures as the one the manifest signs for `file` (the size is part of it): its
    /// content is then the signed content without reading it. Nil otherwise, and for
    /// signatures over another digest.
    fileprivate static func verityContent(_ file: Manifest.File, _ fd: FileDescriptor, algorithm: SignatureAlgorithm) -> Digest? {
        guard let expected = file.verity, algorithm.digest == .sha256, case .digest(let measured) = VerityFile.measure(fd),
            expected.matches(bytes: measured), let sha256 = file.content.bytes
        else { return nil }
        return Digest(algorithm: .sha256, bytes: sha256)
    }

    /// The installed file carries exactly the IMA attribute this install writes: the one
    /// `--ima` names, made from `signature`, and not the other; neither without `--ima`.
    private func imaMatches(_ fd: FileDescriptor, signature: [UInt8], key: PublicKey, checked: PackageReader.Checked) -> Bool {
        for name in [IMASignature.userAttribute, IMASignature.securityAttribute] {
            let present = ExtendedAttributes.get(name, on: fd)
            if name == options.imaAttribute {
                guard let ima = IMASignature(signatureBytes: signature, algorithm: checked.algorithm, key: key),
                    case .success(let bytes?) = present, bytes == ima.bytes
                else { return false }
            } else {
                guard case .success(nil) = present else { return false }
            }
        }
        return true
    }
}
