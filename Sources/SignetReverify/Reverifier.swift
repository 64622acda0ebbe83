import Foundation
import Synchronization
public import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto
import SignetManifest

/// Re-verifies installed files from their signature attributes (FORMAT.md §3).
public enum Reverifier {
    // MARK: Single files

    /// Re-verifies one file: opened once with O_NOFOLLOW; its signature (`user.signet.sig`, else
    /// an IMA attribute, else the sidecar of the installed tree it is in) and its content are read
    /// through that descriptor. Never throws: every outcome is a verdict.
    public static func verifyFile(at path: String, policy: TrustPolicy) -> FileReport {
        let file: InputFile
        do {
            file = try InputFile.open(path, what: "file", followSymlinks: false)
        } catch {
            return unreadable(path, error)
        }
        let report = verifyOpened(file, path: path, policy: policy) { descriptor, meta in
            try signatureOf(descriptor, path: path, meta: meta)
        }
        return damagedAttribute(report, file: file, path: path, policy: policy) ?? report
    }

    /// A file whose attribute does not verify may still be the signed content with a damaged
    /// attribute: when the installed tree's own copy of its signature verifies over the
    /// content, the verdict is `attributes-lost` (saying so), not `modified`. Nil otherwise.
    private static func damagedAttribute(_ report: FileReport, file: InputFile, path: String, policy: TrustPolicy) -> FileReport? {
        guard report.verdict == .modified, report.signatureSource == .xattr || report.signatureSource == .ima,
            let (root, relative) = installedTree(containing: path),
            let copy = try? treeCopy(root: root, relative: relative)
        else { return nil }
        let algorithm = SignetMetadata(file.descriptor)?.algorithm ?? .default
        guard lseek(file.descriptor.rawValue, 0, SEEK_SET) == 0,
            let digest = try? Digest.compute(descriptorOf: file, algorithm: algorithm.digest),
            let key = Verifier(policy: policy).verify(signature: copy, digest: digest, algorithm: algorithm).signer
        else { return nil }
        return FileReport(
            path: path, verdict: .attributesLost,
            detail:
                "'\(path)' is the signed content (the installed tree's copy of its signature verifies with key \(key.keyID.short)), but its \(report.signatureSource == .ima ? "IMA attribute" : "user.signet.sig") is damaged or replaced; reverify '\(root)' --repair restores it",
            signatureSource: .sidecar, signer: nil)
    }

    /// An `unreadable` verdict for `path`, carrying the error (its code decides the exit status).
    static func unreadable(_ path: String, _ error: Error) -> FileReport {
        let failure = error as? SignetError ?? SignetError(.io, "cannot read '\(path)': \(error)", path: path)
        var made = FileReport(path: path, verdict: .unreadable, detail: failure.reason, signatureSource: nil, signer: nil)
        made.error = failure
        return made
    }

    /// The check of ``verifyFile(at:policy:)`` on a file already opened; `findSignature` gives
    /// its signature, algorithm and source (nil: unsigned).
    static func verifyOpened(
        _ file: InputFile, path: String, policy: TrustPolicy,
        findSignature: (FileDescriptor, SignetMetadata?) throws -> ([UInt8], SignatureAlgorithm, SignatureSource)?
    ) -> FileReport {
        func report(_ verdict: FileVerdict, _ detail: String, _ source: SignatureSource? = nil, _ signer: KeyID? = nil) -> FileReport {
            FileReport(path: path, verdict: verdict, detail: detail, signatureSource: source, signer: signer)
        }
        func unreadable(_ error: Error) -> FileReport { Reverifier.unreadable(path, error) }
        let meta = SignetMetadata(file.descriptor)
        let found: ([UInt8], SignatureAlgorithm, SignatureSource)?
        do { found = try findSignature(file.descriptor, meta) } catch {
            return unreadable(error)
        }
        guard let (signature, algorithm, source) = found else {
            return report(
                .unsigned,
                "'\(path)' has no user.signet.sig or IMA attribute and no sidecar signature: it was not installed by Signet, or its attributes were stripped")
        }
        let digest: Digest
        do {
            digest = try Digest.compute(descriptorOf: file, algorithm: algorithm.digest)
        } catch {
            return unreadable(error)
        }
        let result = Verifier(policy: policy).verify(signature: signature, digest: digest, algorithm: algorithm)
        if let key = result.signer {
            return report(.ok, "verified with key \(key.keyID.short) (\(algorithm.id), from \(source))", source, key.keyID)
        }
        if result.failure == .untrusted {
            return report(.untrusted, "'\(path)': \(result.message)", source)
        }
        if let claimed = meta?.keyID, let refusal = policy.refusal(for: claimed) {
            return report(.untrusted, "'\(path)' is signed by key \(claimed.short), which the trust policy does not accept: \(refusal)", source)
        }
        return report(
            .modified, "'\(path)' does not match its signature (from \(source)): the content was changed, or the signature belongs to another file", source)
    }

    /// The signature, its algorithm and where it came from.
    /// A sidecar that cannot be read (other than absent) is an error, never "unsigned".
    static func signatureOf(_ descriptor: FileDescriptor, path: String, meta: SignetMetadata?) throws -> ([UInt8], SignatureAlgorithm, SignatureSource)? {
        let algorithm = meta?.algorithm ?? .default
        if case .success(let bytes?) = ExtendedAttributes.get(ExtendedAttributes.signature, on: descriptor) {
            return (bytes, algorithm, .xattr)
        }
        for name in [IMASignature.userAttribute, IMASignature.securityAttribute] {
            if case .success(let bytes?) = ExtendedAttributes.get(name, on: descriptor),
                let ima = IMASignature(bytes: bytes), let imaAlgorithm = ima.signatureAlgorithm
            {
                return (ima.signature, imaAlgorithm, .ima)
            }
        }
        if let (root, relative) = installedTree(containing: path), let copy = try treeCopy(root: root, relative: relative) {
            return (copy, algorithm, .sidecar)
        }
        return nil
    }

    /// The installed tree's own copy of the signature of `relative`: its sidecar file
    /// (filesystems without user attributes, bare packages, older trees), else its entry in the
    /// tree's signature record. Nil when there is none; a read error is thrown, never taken for
    /// "none". Not verified here.
    static func treeCopy(root: String, relative: String) throws -> [UInt8]? {
        do {
            return try readSmallFile(root + "/" + TreeLayout.signature(of: relative), what: "sidecar signature", limit: 64 * 1024)
        } catch let error as SignetError where error.code == .fileNotFound {
            // No sidecar: the record, at the file's place in the manifest.
        }
        let tree: OwnedDescriptor
        do { tree = try Paths.open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC) } catch {
            throw SignetError.posix(error, "cannot open the installed tree", path: root)
        }
        let rootFD = tree.descriptor
        guard let bytes = try InputFile.readBeneath(rootFD, TreeLayout.manifest, rootPath: root, what: "installed manifest", limit: 64 << 20),
            let manifest = try? Manifest.parse(bytes),
            let index = manifest.files.firstIndex(where: { $0.path == relative })
        else { return nil }
        return SignatureRecord.Reader(beneath: rootFD, files: manifest.files.count)?.signature(at: index)
    }

    /// The installed tree (a directory with `.signet/manifest.json`) that holds `path`, and the
    /// path relative to it.
    static func installedTree(containing path: String) -> (String, String)? {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var components = absolute.split(separator: "/").map(String.init)
        var relative: [String] = []
        while components.count > 1 {
            relative.insert(components.removeLast(), at: 0)
            let root = "/" + components.joined(separator: "/")
            if access(root + "/" + TreeLayout.manifest, F_OK) == 0 || access(root + "/" + TreeLayout.bareMarker, F_OK) == 0 {
                return (root, relative.joined(separator: "/"))
            }
        }
        return nil
    }

    /// Whether the directory `rootFD` is a tree unpack `--bare` installed: it has
    /// `.signet/bare` (or, from before that marker existed, `.signet/sigs/` and no manifest).
    package static func isBareTree(_ root: FileDescriptor) -> Bool {
        let rootFD = root.rawValue
        var info = stat()
        if fstatat(rootFD, TreeLayout.bareMarker, &info, AT_SYMLINK_NOFOLLOW) == 0 { return info.st_mode & S_IFMT == S_IFREG }
        guard fstatat(rootFD, TreeLayout.manifest, &info, AT_SYMLINK_NOFOLLOW) != 0 else { return false }
        return fstatat(rootFD, TreeLayout.signatures, &info, AT_SYMLINK_NOFOLLOW) == 0 && info.st_mode & S_IFMT == S_IFDIR
    }

    /// Where a tree that is marked bare says it came from a signed manifest: a file whose
    /// `user.signet.meta` names a package and sequence (a bare install records neither), or
    /// `.signet/signatures`, which only a manifest install writes. Such a tree had its
    /// manifest or manifest signature removed; treated as bare, it would lose the completeness,
    /// rollback and product checks. Nil when nothing says so (the files are read until one does).
    package static func manifestOrigin(of rootFD: FileDescriptor, files walked: [String]? = nil) -> (name: String, sequence: UInt64)? {
        var info = stat()
        let recorded = fstatat(rootFD.rawValue, TreeLayout.signatureRecord, &info, AT_SYMLINK_NOFOLLOW) == 0
        for relative in walked ?? (try? diskFiles(rootFD, root: "")) ?? [] {
            guard let file = try? Paths.open(relative, beneath: rootFD, flags: O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC),
                case .success(let bytes?) = ExtendedAttributes.get(TreeLayout.metadataAttribute, on: file.descriptor),
                let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
                let name = object["name"] as? String
            else { continue }
            return (name, (object["sequence"] as? NSNumber)?.uint64Value ?? 0)
        }
        return recorded ? ("(unknown)", 0) : nil
    }

    /// Whether `path` is a directory itself (not a link to one), for choosing between
    /// `verifyTree(at:policy:options:)` and `verifyFile(at:policy:)`. Paths of any length.
    public static func isDirectory(atPath path: String) -> Bool {
        Paths.isDirectory(path)
    }

    // MARK: Async

    /// ``verifyFile(at:policy:)-56ylx`` on a thread of its own (not Swift concurrency's shared pool).
    public static func verifyFileAsync(at path: String, policy: TrustPolicy) async -> FileReport {
        await OwnThreads.async { verifyFile(at: path, policy: policy) }
    }

    /// The old name of ``verifyFileAsync(at:policy:)-(String,_)``.
    @available(
        *, deprecated, renamed: "verifyFileAsync(at:policy:)",
        message: "the async form has its own name, so that a blocking call is never chosen for `try await`"
    )
    public static func verifyFile(at path: String, policy: TrustPolicy) async -> FileReport {
        await verifyFileAsync(at: path, policy: policy)
    }

    /// `verifyTree(at:policy:options:)` (the blocking form) on threads of its own (not Swift concurrency's shared
    /// pool, which blocking file I/O would starve); cancelling the task stops it between files
    /// and throws `CancellationError`.
    public static func verifyTreeAsync(at root: String, policy: TrustPolicy, options: ReverifyOptions = ReverifyOptions()) async throws -> TreeReport {
        let cancelled = CancellationFlag()
        return try await withTaskCancellationHandler {
            try await OwnThreads.async { try verifyTree(at: root, policy: policy, options: options, cancelled: cancelled) }
        } onCancel: {
            cancelled.set()
        }
    }

    /// The old name of ``verifyTreeAsync(at:policy:options:)-(String,_,_)``.
    @available(
        *, deprecated, renamed: "verifyTreeAsync(at:policy:options:)",
        message: "the async form has its own name, so that a blocking call is never chosen for `try await`"
    )
    public static func verifyTree(at root: String, policy: TrustPolicy, options: ReverifyOptions = ReverifyOptions()) async throws -> TreeReport {
        try await verifyTreeAsync(at: root, policy: policy, options: options)
    }
}

// MARK: Swift-native forms: FilePath and URL paths, DataProtocol bytes

extension Reverifier {
    /// Re-verifies one installed file, blocking.
    public static func verifyFile(at path: FilePath, policy: TrustPolicy) -> FileReport {
        verifyFile(at: path.string, policy: policy)
    }

    /// Re-verifies one installed file on a thread of its own.
    public static func verifyFileAsync(at path: FilePath, policy: TrustPolicy) async -> FileReport {
        await verifyFileAsync(at: path.string, policy: policy)
    }

    /// Re-verifies an installed tree, blocking.
    public static func verifyTree(at root: FilePath, policy: TrustPolicy, options: ReverifyOptions = ReverifyOptions()) throws -> TreeReport {
        try verifyTree(at: root.string, policy: policy, options: options)
    }

    /// Re-verifies an installed tree on threads of its own; cancelling the task stops it.
    public static func verifyTreeAsync(at root: FilePath, policy: TrustPolicy, options: ReverifyOptions = ReverifyOptions()) async throws -> TreeReport {
        try await verifyTreeAsync(at: root.string, policy: policy, options: options)
    }
}
