public import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto
import SignetManifest
import SignetArchive

/// Reads and verifies packages without extracting anything (FORMAT.md §2).
public enum PackageReader {
    /// Checks the archive's structure and every entry name, and parses the manifest (without
    /// trusting it). Throws ``/SignetCore/SignetError`` with `.malformedArchive` or `.malformedManifest`
    /// (exit 4) for anything a valid package cannot contain.
    public static func contents(of path: String, limits: PackageLimits = PackageLimits()) throws -> PackageContents {
        try contents(of: try ZipReader(path: path, maximumEntries: limits.maximumEntries), limits: limits)
    }

    static func contents(of reader: ZipReader, limits: PackageLimits) throws -> PackageContents {
        let layout = try Layout(reader: reader, limits: limits)
        let manifest = try Manifest.parse(try reader.readAll(layout.manifest!, limit: limits.maxManifestSize, name: TreeLayout.manifest))
        return layout.contents(manifest: manifest)
    }

    /// Verifies a package against a trust policy: the manifest signature over the stored bytes
    /// first (before parsing them), then expiry, the exact set of resources, and each resource's
    /// size, SHA-256 and own signature, streaming every entry.
    /// `progress` is told how many files and bytes have been checked.
    public static func verify(
        _ path: String, policy: TrustPolicy, limits: PackageLimits = PackageLimits(),
        now: Timestamp = .now, progress handler: ProgressHandler? = nil
    ) throws -> PackageVerification {
        try verify(reader: try ZipReader(path: path, maximumEntries: limits.maximumEntries), policy: policy, limits: limits, now: now, progress: handler)
    }

    static func verify(
        reader: ZipReader, policy: TrustPolicy, limits: PackageLimits, now: Timestamp,
        progress handler: ProgressHandler?
    ) throws -> PackageVerification {
        let layout = try Layout(reader: reader, limits: limits)
        let checked: Checked
        switch try checkManifest(reader: reader, layout: layout, policy: policy, limits: limits, now: now) {
        case .rejected(let verdict): return verdict
        case .checked(let value): checked = value
        }
        let files = checked.manifest.files
        let progress = ProgressCounter.make(handler, items: files.count, bytes: files.reduce(0) { $0 &+ $1.size })
        let sink: ((UnsafeRawBufferPointer) throws -> Void)? = progress.map { counter in { counter.add(bytes: $0.count) } }
        // Signatures are verified on the second core while the next files are read; the first
        // failure in manifest order wins, as when each file is checked in turn.
        let signatures = SignatureChecks(key: checked.key, algorithm: checked.algorithm)
        func firstBadSignature() -> PackageVerification? {
            signatures.firstRejection().map { checked.verdict($0.failure, $0.message, entry: $0.entry) }
        }
        // The record an install would write, hashed for `.signet/signatures.sig` (as unpack checks it).
        let record = layout.recordSignature == nil ? nil : try Digest.Hasher(checked.algorithm.digest)
        SignatureRecord.header(length: checked.key.signatureLength).withUnsafeBytes { record?.update($0) }
        for (index, file) in files.enumerated() {
            let result: ResourceCheck
            do {
                result = try checkResource(file, reader: reader, layout: layout, checked: checked, sink: sink) { signature, digest in
                    signature.withUnsafeBytes { record?.update($0) }
                    signatures.submit(index: index, file: file, signature: signature, digest: digest)
                }
            } catch {
                // An earlier file's bad signature is what a check in turn would have reported.
                if let verdict = firstBadSignature() { return verdict }
                throw error
            }
            if case .rejected(let failure, let message, let entry) = result {
                return firstBadSignature() ?? checked.verdict(failure, message, entry: entry)
            }
            progress?.add(items: 1)
        }
        if let verdict = firstBadSignature() { return verdict }
        if let index = ChunkIndexReader(manifest: checked.manifest, layout: layout, reader: reader), let reason = index.check(files) {
            return checked.verdict(.modified, reason, entry: TreeLayout.chunkIndex)
        }
        if let record, let entry = layout.recordSignature {
            let signature = try reader.readAll(entry, limit: 64 * 1024, name: TreeLayout.signatureRecordSignature)
            guard signature.count == checked.key.signatureLength,
                Verifier.check(signature, digest: try record.finalize(), key: checked.key, algorithm: checked.algorithm)
            else {
                return checked.verdict(
                    .badSignature,
                    "\(TreeLayout.signatureRecordSignature), the signature over the per-file signatures, does not verify with the manifest's key: a signature entry was replaced, or the package was altered",
                    entry: TreeLayout.signatureRecordSignature)
            }
        }
        progress?.finish()
        return PackageVerification(
            contents: checked.contents, signer: checked.key, failure: nil, entry: nil,
            message:
                "\(checked.manifest.name) \(checked.manifest.version) (sequence \(checked.manifest.sequence)) verified: \(checked.manifest.files.count) files signed by key \(checked.key.keyID.short)"
        )
    }

    /// The manifest check's outcome: established facts, or the verdict that ends verification.
    package enum ManifestCheck {
        case checked(Checked)
        case rejected(PackageVerification)
    }

    /// What the manifest check established.
    package struct Checked {
        package let manifest: Manifest
        /// The manifest as signed (emptied by an install once it is staged).
        package var manifestBytes: [UInt8]
        package let manifestSignature: [UInt8]
        package let key: PublicKey
        package let algorithm: SignatureAlgorithm
        /// The other keys whose signature an unchanged installed file may keep in a tree of
        /// this manifest (`TrustPolicy.peerKeys`).
        package let peers: [PublicKey]
        let contents: PackageContents

        func verdict(_ failure: PackageVerification.Failure, _ message: String, entry: String?) -> PackageVerification {
            PackageVerification(contents: contents, signer: nil, failure: failure, entry: entry, message: message)
        }
    }

    /// The manifest signature over the stored bytes (before they are parsed), key id, algorithm,
    /// expiry, and that the archive holds exactly the listed resources and their signatures.
    package static func checkManifest(
        reader: ZipReader, layout: Layout, policy: TrustPolicy, limits: PackageLimits,
        now: Timestamp
    ) throws -> ManifestCheck {
        let manifestBytes = try reader.readAll(layout.manifest!, limit: limits.maxManifestSize, name: TreeLayout.manifest)
        let signature = try reader.readAll(layout.manifestSignature!, limit: 64 * 1024, name: TreeLayout.manifestSignature)
        // The policy for this package: its signer certificate may vouch for its key.
        let signerCertificate = try layout.signerCertificate.map { try reader.readAll($0, limit: 1 << 20, name: TreeLayout.signerCertificate) }
        let chain = try layout.certificates.filter { TreeLayout.chainIndex(of: $0.name) != nil }
            .sorted { TreeLayout.chainIndex(of: $0.name)! < TreeLayout.chainIndex(of: $1.name)! }
            .map { try reader.readAll($0.entry, limit: 1 << 20, name: $0.name) }
        let (resolved, certificateRefusal) = policy.resolved(signerCertificate: signerCertificate, chain: chain)
        // Which key and algorithm signed the bytes as stored. Nothing in them is read before this.
        let signer = try Manifest.signer(of: manifestBytes, signature: signature, policy: resolved)
        let manifest = try Manifest.parse(manifestBytes)
        let contents = layout.contents(manifest: manifest)
        func verdict(_ failure: PackageVerification.Failure, _ message: String, entry: String? = nil) -> ManifestCheck {
            .rejected(PackageVerification(contents: contents, signer: nil, failure: failure, entry: entry, message: message))
        }
        guard let (key, algorithm) = signer else {
            if let refusal = resolved.key(withID: manifest.keyID) == nil ? (certificateRefusal ?? policy.refusal(for: manifest.keyID)) : nil {
                return verdict(
                    .untrustedSigner, "the package is signed by key \(manifest.keyID.short), which the trust policy does not accept: \(refusal)",
                    entry: TreeLayout.manifest)
            }
            return verdict(
                .badManifestSignature,
                "the manifest signature does not verify with the trusted key \(manifest.keyID.short): the manifest or its signature was altered",
                entry: TreeLayout.manifestSignature)
        }
        guard key.keyID == manifest.keyID, algorithm == manifest.algorithm else {
            return verdict(
                .badManifestSignature,
                "the manifest names key \(manifest.keyID.short) and \(manifest.algorithm.id), but was signed by \(key.keyID.short) with \(algorithm.id)",
                entry: TreeLayout.manifest)
        }
        // A key trusted only through TUF metadata vouches only for what its role lists.
        if let refusal = resolved.tufRefusal(signer: key.keyID, manifestBytes: manifestBytes, manifest: manifest) {
            return verdict(.untrustedSigner, refusal, entry: TreeLayout.manifest)
        }
        // Saturating: a clock skew near Int64.max means "never expired", not a trap.
        if let expires = manifest.expires,
            case let (deadline, overflow) = expires.secondsSinceEpoch.addingReportingOverflow(max(0, policy.clockSkew)),
            !overflow, deadline < now.secondsSinceEpoch
        {
            return verdict(
                .expired, "the package expired at \(expires) (it is now \(now), allowing \(policy.clockSkew) s of clock skew); get a newer release",
                entry: TreeLayout.manifest)
        }
        // The archive must hold exactly the listed resources and a signature for each, by the
        // bytes of their paths. Counting matches finds whether anything is left over; only then
        // is the first extra entry (in byte order) looked for, to name it.
        var matchedResources = 0, matchedSignatures = 0
        var missing: ManifestCheck? = nil
        for file in manifest.files {
            if layout.resource(file.path) != nil {
                matchedResources += 1
            } else if missing == nil {
                missing = verdict(.missing, "the manifest lists '\(file.path)', but the archive does not hold it", entry: file.path)
            }
            if layout.signature(file.path) != nil {
                matchedSignatures += 1
            } else if missing == nil {
                missing = verdict(.missing, "'\(file.path)' has no signature (\(TreeLayout.signature(of: file.path)))", entry: file.path)
            }
        }
        if matchedResources < layout.resourceCount || matchedSignatures < layout.signatureCount {
            let listed = Set(manifest.files.lazy.map { Array($0.path.utf8) })
            for resource in layout.resourcePathsByName where !listed.contains(Array(resource.utf8)) {
                return verdict(.extra, "the archive holds '\(resource)', which the manifest does not list", entry: resource)
            }
            for signed in layout.signedPathsByName where !listed.contains(Array(signed.utf8)) {
                return verdict(
                    .extra, "the archive holds a signature for '\(signed)', which the manifest does not list", entry: TreeLayout.signature(of: signed))
            }
        }
        if let missing { return missing }
        // The chunk-index entry: there exactly when the manifest binds one, of its size.
        switch (manifest.chunkIndex, layout.chunkIndex) {
        case (let declared?, let entry?) where entry.size != declared.size:
            return verdict(.modified, "\(TreeLayout.chunkIndex) holds \(entry.size) bytes; the manifest binds \(declared.size)", entry: TreeLayout.chunkIndex)
        case (_?, nil):
            return verdict(.missing, "the manifest binds a chunk-index entry, but the archive has no \(TreeLayout.chunkIndex)", entry: TreeLayout.chunkIndex)
        case (nil, _?):
            return verdict(.extra, "the archive holds \(TreeLayout.chunkIndex), which the manifest does not bind", entry: TreeLayout.chunkIndex)
        default: break
        }
        return .checked(
            Checked(
                manifest: manifest, manifestBytes: manifestBytes,
                manifestSignature: signature, key: key, algorithm: algorithm,
                peers: resolved.peerKeys(of: key.keyID, manifestBytes: manifestBytes, manifest: manifest), contents: contents))
    }

    /// One resource's verdict: its verified signature, or why it was rejected.
    package enum ResourceCheck {
        case verified(signature: [UInt8])
        case rejected(PackageVerification.Failure, message: String, entry: String)
    }

    /// Streams one resource (to `sink`, if given) while hashing it, reading at most its manifest
    /// size + 1 bytes; checks size, SHA-256 and its signature. With `later`, the signature is
    /// handed to it (with the digest it must verify) instead of checked here, and the result is
    /// `.verified` only as far as size and content go.
    package static func checkResource(
        _ file: Manifest.File, reader: ZipReader, layout: Layout, checked: Checked,
        sink: ((UnsafeRawBufferPointer) throws -> Void)?,
        later: ((_ signature: [UInt8], _ digest: Digest) -> Void)? = nil
    ) throws -> ResourceCheck {
        let entry = layout.resource(file.path)!
        let signatureEntry = layout.signature(file.path)!
        // The archive must first agree with itself: data that does not match its own headers is
        // malformed (exit 4) whatever the manifest says. Only a consistent entry of another size
        // than the signed one is "modified".
        guard entry.size == file.size else {
            try reader.read(entry, limit: entry.size, name: file.path) { _ in }
            return .rejected(
                .modified, message: "'\(file.path)' is \(entry.size) bytes in the archive, not the \(file.size) bytes the manifest says", entry: file.path)
        }
        let algorithms = checked.algorithm.digest == .sha256 ? [DigestAlgorithm.sha256] : [.sha256, checked.algorithm.digest]
        // A signed fs-verity digest is checked in the same read (FORMAT §2, `verity`):
        // a package whose digests do not match its content is refused here, not by every device
        // that installs it with --verity.
        let verity = file.verity == nil ? nil : try VerityDigest()
        let feed: ((UnsafeRawBufferPointer) throws -> Void)? =
            verity.map { builder in
                { chunk in
                    try builder.update(chunk)
                    try sink?(chunk)
                }
            } ?? sink
        let digests = try hashedRead(entry, size: file.size, name: file.path, reader: reader, algorithms: algorithms, sink: feed)
        guard file.content.matches(digests[0]) else {
            return .rejected(.modified, message: "'\(file.path)' does not match the SHA-256 in the manifest", entry: file.path)
        }
        if let verity, let expected = file.verity, !expected.matches(bytes: try verity.finalize()) {
            return .rejected(.modified, message: ContentHashers.verityMessage(file.path), entry: file.path)
        }
        let signature = try reader.readAll(signatureEntry, limit: 64 * 1024, name: TreeLayout.signature(of: file.path))
        if let later {
            later(signature, digests[digests.count - 1])
            return .verified(signature: signature)
        }
        return signatureCheck(file, signature: signature, digest: digests[digests.count - 1], key: checked.key, algorithm: checked.algorithm)
    }

    /// A resource's signature against the manifest's key: checked directly (no policy or
    /// message built per file); the full verifier only explains a signature that does not verify.
    package static func signatureCheck(_ file: Manifest.File, signature: [UInt8], digest: Digest, key: PublicKey, algorithm: SignatureAlgorithm)
        -> ResourceCheck
    {
        if signature.count == key.signatureLength, Verifier.check(signature, digest: digest, key: key, algorithm: algorithm) {
            return .verified(signature: signature)
        }
        let result = Verifier(policy: TrustPolicy(keys: [key])).verify(signature: signature, digest: digest, algorithm: algorithm)
        guard result.isValid else {
            return .rejected(
                .badSignature, message: "the signature of '\(file.path)' is invalid: \(result.message)", entry: TreeLayout.signature(of: file.path))
        }
        return .verified(signature: signature)
    }
}

extension PackageReader {
    // Swift-native forms: FilePath paths.
    /// Reads a package's manifest and entries without verifying them.
    public static func contents(of path: FilePath, limits: PackageLimits = PackageLimits()) throws -> PackageContents {
        try contents(of: path.string, limits: limits)
    }

    /// Verifies a package file without installing it.
    public static func verify(
        _ path: FilePath, policy: TrustPolicy, limits: PackageLimits = PackageLimits(),
        now: Timestamp = .now, progress handler: ProgressHandler? = nil
    ) throws -> PackageVerification {
        try verify(path.string, policy: policy, limits: limits, now: now, progress: handler)
    }
}
