public import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Reads and verifies packages without extracting anything (FORMAT.md §2).
public enum PackageReader {
    /// Checks the archive's structure and every entry name, and parses the manifest (without
    /// trusting it). Throws ``SignetError`` with `.malformedArchive` or `.malformedManifest`
    /// (exit 4) for anything a valid package cannot contain.
    public static func contents(of path: String, limits: PackageLimits = PackageLimits()) throws -> PackageContents {
        try contents(of: try ZipReader(path: path, maximumEntries: limits.maximumEntries), limits: limits)
    }

    /// ``contents(of:limits:)-(String,_)`` for a package on an HTTPS server: read with range requests
    /// (only the end of the zip, its directory and the manifest), or downloaded into a private
    /// temporary folder and removed when the server does not answer ranges.
    public static func contents(downloading url: String, download: DownloadOptions = DownloadOptions(),
                                limits: PackageLimits = PackageLimits()) throws -> PackageContents {
        try remote(url, download: download) { input, headers in
            try contents(of: try ZipReader(input: input, maximumEntries: limits.maximumEntries, localHeaders: headers), limits: limits)
        }
    }

    /// ``verify(_:policy:limits:now:progress:)-(String,_,_,_,_)`` for a package on an HTTPS server, read with
    /// range requests over one connection (each pinned to the first answer's validator with
    /// `If-Range`), never stored on the device; a server that does not answer ranges gets the
    /// whole package downloaded into a private temporary folder, removed afterwards.
    public static func verify(downloading url: String, policy: TrustPolicy, download: DownloadOptions = DownloadOptions(),
                              limits: PackageLimits = PackageLimits(), now: Timestamp = .now,
                              progress handler: ProgressHandler? = nil) throws -> PackageVerification {
        try remote(url, download: download) { input, headers in
            let reader = try ZipReader(input: input, maximumEntries: limits.maximumEntries, localHeaders: headers)
            // Every resource is read, in order: in requests of a few MiB, not one per read.
            (input as? RangedInput)?.plan([0..<input.size])
            return try verify(reader: reader, policy: policy, limits: limits, now: now, progress: handler)
        }
    }

    /// Runs `body` on the package at `url` read through ranges, else on a downloaded copy.
    /// Local headers are checked as their entries are read when the package is read through
    /// ranges (reading all of them would fetch the whole file), up front on a downloaded copy.
    private static func remote<R>(_ url: String, download: DownloadOptions,
                                  _ body: (any ArchiveInput, CentralDirectory.LocalHeaders) throws -> R) throws -> R {
        try Downloader.checkScheme(url, policy: download.tls)
        // Where the package goes if the server sends it whole (the first answer is then used).
        let copy = try Download.temporaryPath()
        defer { Download.removeTemporaryCopy(copy) }
        let input: RangedInput
        do {
            input = try RangedInput(url: url, options: download, whole: .init(partial: copy, options: download, cancelled: nil, body: nil, restart: {}))
        } catch let unsupported as RangeClient.Unsupported {
            if unsupported.download == nil {
                _ = try Downloader.download(url, into: copy, options: download, durable: false)
            }
            let file = try InputFile.open(copy, what: "package")
            return try body(RenamedInput(file, path: Download.redacted(url)), .upFront)
        }
        return try body(input, .deferred)
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
    public static func verify(_ path: String, policy: TrustPolicy, limits: PackageLimits = PackageLimits(),
                              now: Timestamp = .now, progress handler: ProgressHandler? = nil) throws -> PackageVerification {
        try verify(reader: try ZipReader(path: path, maximumEntries: limits.maximumEntries), policy: policy, limits: limits, now: now, progress: handler)
    }

    static func verify(reader: ZipReader, policy: TrustPolicy, limits: PackageLimits, now: Timestamp,
                       progress handler: ProgressHandler?) throws -> PackageVerification {
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
        if let record, let entry = layout.recordSignature {
            let signature = try reader.readAll(entry, limit: 64 * 1024, name: TreeLayout.signatureRecordSignature)
            guard signature.count == checked.key.signatureLength,
                  Verifier.check(signature, digest: try record.finalize(), key: checked.key, algorithm: checked.algorithm) else {
                return checked.verdict(.badSignature, "\(TreeLayout.signatureRecordSignature), the signature over the per-file signatures, does not verify with the manifest's key: a signature entry was replaced, or the package was altered", entry: TreeLayout.signatureRecordSignature)
            }
        }
        progress?.finish()
        return PackageVerification(contents: checked.contents, signer: checked.key, failure: nil, entry: nil,
                                   message: "\(checked.manifest.name) \(checked.manifest.version) (sequence \(checked.manifest.sequence)) verified: \(checked.manifest.files.count) files signed by key \(checked.key.keyID.short)")
    }

    /// The manifest check's outcome: established facts, or the verdict that ends verification.
    enum ManifestCheck {
        case checked(Checked)
        case rejected(PackageVerification)
    }
    /// The trusted key and algorithm whose signature over the manifest bytes, as stored, verifies.
    /// Every supported algorithm is tried, so nothing in the unverified bytes is believed first.
    static func manifestSigner(_ bytes: [UInt8], signature: [UInt8], policy: TrustPolicy) throws -> (PublicKey, SignatureAlgorithm)? {
        for algorithm in SignatureAlgorithm.all {
            let digest = try Digest.compute(bytes, algorithm: algorithm.digest)
            if let key = Verifier(policy: policy).verify(signature: signature, digest: digest, algorithm: algorithm).signer {
                return (key, algorithm)
            }
        }
        return nil
    }

    /// What the manifest check established.
    struct Checked {
        let manifest: Manifest
        /// The manifest as signed (emptied by an install once it is staged).
        var manifestBytes: [UInt8]
        let manifestSignature: [UInt8]
        let key: PublicKey
        let algorithm: SignatureAlgorithm
        let contents: PackageContents

        func verdict(_ failure: PackageVerification.Failure, _ message: String, entry: String?) -> PackageVerification {
            PackageVerification(contents: contents, signer: nil, failure: failure, entry: entry, message: message)
        }
    }

    /// The manifest signature over the stored bytes (before they are parsed), key id, algorithm,
    /// expiry, and that the archive holds exactly the listed resources and their signatures.
    static func checkManifest(reader: ZipReader, layout: Layout, policy: TrustPolicy, limits: PackageLimits,
                              now: Timestamp) throws -> ManifestCheck {
        let manifestBytes = try reader.readAll(layout.manifest!, limit: limits.maxManifestSize, name: TreeLayout.manifest)
        let signature = try reader.readAll(layout.manifestSignature!, limit: 64 * 1024, name: TreeLayout.manifestSignature)
        // The policy for this package: its signer certificate may vouch for its key.
        let signerCertificate = try layout.signerCertificate.map { try reader.readAll($0, limit: 1 << 20, name: TreeLayout.signerCertificate) }
        let chain = try layout.certificates.filter { TreeLayout.chainIndex(of: $0.name) != nil }
            .sorted { TreeLayout.chainIndex(of: $0.name)! < TreeLayout.chainIndex(of: $1.name)! }
            .map { try reader.readAll($0.entry, limit: 1 << 20, name: $0.name) }
        let (resolved, certificateRefusal) = policy.resolved(signerCertificate: signerCertificate, chain: chain)
        // Which key and algorithm signed the bytes as stored. Nothing in them is read before this.
        let signer = try manifestSigner(manifestBytes, signature: signature, policy: resolved)
        let manifest = try Manifest.parse(manifestBytes)
        let contents = layout.contents(manifest: manifest)
        func verdict(_ failure: PackageVerification.Failure, _ message: String, entry: String? = nil) -> ManifestCheck {
            .rejected(PackageVerification(contents: contents, signer: nil, failure: failure, entry: entry, message: message))
        }
        guard let (key, algorithm) = signer else {
            if let refusal = resolved.key(withID: manifest.keyID) == nil ? (certificateRefusal ?? policy.refusal(for: manifest.keyID)) : nil {
                return verdict(.untrustedSigner, "the package is signed by key \(manifest.keyID.short), which the trust policy does not accept: \(refusal)", entry: TreeLayout.manifest)
            }
            return verdict(.badManifestSignature, "the manifest signature does not verify with the trusted key \(manifest.keyID.short): the manifest or its signature was altered", entry: TreeLayout.manifestSignature)
        }
        guard key.keyID == manifest.keyID, algorithm == manifest.algorithm else {
            return verdict(.badManifestSignature, "the manifest names key \(manifest.keyID.short) and \(manifest.algorithm.id), but was signed by \(key.keyID.short) with \(algorithm.id)", entry: TreeLayout.manifest)
        }
        // A key trusted only through TUF metadata vouches only for what its role lists.
        if let refusal = resolved.tufRefusal(signer: key.keyID, manifestBytes: manifestBytes, manifest: manifest) { return verdict(.untrustedSigner, refusal, entry: TreeLayout.manifest) }
        // Saturating: a clock skew near Int64.max means "never expired", not a trap.
        if let expires = manifest.expires,
           case let (deadline, overflow) = expires.secondsSinceEpoch.addingReportingOverflow(max(0, policy.clockSkew)),
           !overflow, deadline < now.secondsSinceEpoch {
            return verdict(.expired, "the package expired at \(expires) (it is now \(now), allowing \(policy.clockSkew) s of clock skew); get a newer release", entry: TreeLayout.manifest)
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
                return verdict(.extra, "the archive holds a signature for '\(signed)', which the manifest does not list", entry: TreeLayout.signature(of: signed))
            }
        }
        if let missing { return missing }
        return .checked(Checked(manifest: manifest, manifestBytes: manifestBytes,
                                manifestSignature: signature, key: key, algorithm: algorithm, contents: contents))
    }

    /// One resource's verdict: its verified signature, or why it was rejected.
    enum ResourceCheck {
        case verified(signature: [UInt8])
        case rejected(PackageVerification.Failure, message: String, entry: String)
    }

    /// Streams one resource (to `sink`, if given) while hashing it, reading at most its manifest
    /// size + 1 bytes; checks size, SHA-256 and its signature. With `later`, the signature is
    /// handed to it (with the digest it must verify) instead of checked here, and the result is
    /// `.verified` only as far as size and content go.
    static func checkResource(_ file: Manifest.File, reader: ZipReader, layout: Layout, checked: Checked,
                              sink: ((UnsafeRawBufferPointer) throws -> Void)?,
                              later: ((_ signature: [UInt8], _ digest: Digest) -> Void)? = nil) throws -> ResourceCheck {
        let entry = layout.resource(file.path)!
        let signatureEntry = layout.signature(file.path)!
        // The archive must first agree with itself: data that does not match its own headers is
        // malformed (exit 4) whatever the manifest says. Only a consistent entry of another size
        // than the signed one is "modified".
        guard entry.size == file.size else {
            try reader.read(entry, limit: entry.size, name: file.path) { _ in }
            return .rejected(.modified, message: "'\(file.path)' is \(entry.size) bytes in the archive, not the \(file.size) bytes the manifest says", entry: file.path)
        }
        let algorithms = checked.algorithm.digest == .sha256 ? [DigestAlgorithm.sha256] : [.sha256, checked.algorithm.digest]
        let digests = try hashedRead(entry, size: file.size, name: file.path, reader: reader, algorithms: algorithms, sink: sink)
        guard file.content.matches(digests[0]) else {
            return .rejected(.modified, message: "'\(file.path)' does not match the SHA-256 in the manifest", entry: file.path)
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
    static func signatureCheck(_ file: Manifest.File, signature: [UInt8], digest: Digest, key: PublicKey, algorithm: SignatureAlgorithm) -> ResourceCheck {
        if signature.count == key.signatureLength, Verifier.check(signature, digest: digest, key: key, algorithm: algorithm) {
            return .verified(signature: signature)
        }
        let result = Verifier(policy: TrustPolicy(keys: [key])).verify(signature: signature, digest: digest, algorithm: algorithm)
        guard result.isValid else {
            return .rejected(.badSignature, message: "the signature of '\(file.path)' is invalid: \(result.message)", entry: TreeLayout.signature(of: file.path))
        }
        return .verified(signature: signature)
    }

    /// The entries of a package, sorted into resources and `.signet/` entries, after every check
    /// that needs no key: names, types, encryption, compression methods, duplicates, limits.
    ///
    /// Entries are kept as positions in the archive's directory (four bytes each), found by name
    /// through indexes sorted by the names' bytes: no String or hash-table slot per entry, so a
    /// package of 50,000 files costs its directory and little more.
    struct Layout {
        /// Resource entries' positions, in archive order.
        private(set) var resourcePositions: [Int32] = []
        /// The same, sorted by name bytes, for ``resource(_:)``.
        private var resourcesByName: [Int32] = []
        /// Signature entries' positions (sorted by the path they sign once `init` is done).
        private var signaturesByName: [Int32] = []
        /// The part of a signature entry's name that is the resource's path.
        private let signatureKey: CentralDirectory.Directory.NameKey
        /// Set for every non-bare layout (its init refuses a package without them).
        var manifest: ZipReader.Entry?
        var manifestSignature: ZipReader.Entry?
        var signerCertificate: ZipReader.Entry?
        /// `.signet/signatures.sig`: the publisher's signature over the installed tree's
        /// signature record (packages made before it existed have none).
        var recordSignature: ZipReader.Entry?
        /// `.signet/certs/*` entries by name, kept with an installed tree.
        var certificates: [(name: String, entry: ZipReader.Entry)] = []
        let path: String
        /// The archive the positions refer to.
        private let reader: ZipReader
        private var directory: CentralDirectory.Directory { reader.directory }

        /// What the entries seen so far add up to, against the limits.
        private var directoryEntries = 0
        private var total: UInt64 = 0

        /// The resource entry named exactly `path` (byte for byte, as the manifest lists it).
        func resource(_ path: String) -> ZipReader.Entry? {
            directory.find(path, in: resourcesByName).map { reader.entry(at: Int($0)) }
        }
        /// The signature entry of the resource `path`.
        func signature(_ path: String) -> ZipReader.Entry? {
            directory.find(path, in: signaturesByName, key: signatureKey).map { reader.entry(at: Int($0)) }
        }
        /// The resources' paths, in archive order.
        var resourcePaths: LazyMapSequence<[Int32], String> { resourcePositions.lazy.map { [directory] in directory.keyString(at: $0) } }
        /// The resources' paths, in byte order.
        var resourcePathsByName: LazyMapSequence<[Int32], String> { resourcesByName.lazy.map { [directory] in directory.keyString(at: $0) } }
        /// The paths of the resources that have a signature entry, in byte order.
        var signedPathsByName: LazyMapSequence<[Int32], String> {
            signaturesByName.lazy.map { [directory, signatureKey] in directory.keyString(at: $0, key: signatureKey) }
        }
        /// How many resources the archive holds.
        var resourceCount: Int { resourcePositions.count }
        /// How many resource signatures it holds.
        var signatureCount: Int { signaturesByName.count }

        /// - Parameter bare: the older layout (FORMAT.md §2): resources and `<path>.sig` beside
        ///   each, no `.signet/` at all. Signatures land in ``signature(_:)``; ``manifest`` is unset.
        init(reader: ZipReader, limits: PackageLimits, bare: Bool = false) throws {
            path = reader.path
            self.reader = reader
            signatureKey = .init(prefix: bare ? 0 : TreeLayout.signatures.utf8.count + 1, suffix: 4)
            // Every named entry, to find a name stored twice once they are sorted; names with
            // non-ASCII characters also as Strings, which compare by canonical equivalence, so
            // that NFC/NFD twins are found as well.
            var named: [Int32] = []
            named.reserveCapacity(reader.count)
            var nonASCII = Set<String>()
            for position in 0..<reader.count {
                let entry = reader.entry(at: position)
                // A name ending in / is a directory record: installs nothing (FORMAT.md §2), but
                // counts against --max-files like any entry.
                guard let name = try checkedName(of: entry) else {
                    directoryEntries += 1
                    guard resourcePositions.count + directoryEntries <= limits.maxFiles else {
                        throw malformed("it holds more than \(limits.maxFiles) files and directory entries (--max-files)", entry: nil)
                    }
                    continue
                }
                try check(entry, name: name, limits: limits)
                named.append(Int32(position))
                if name.utf8.contains(where: { $0 >= 0x80 }), !nonASCII.insert(name).inserted {
                    throw twins(name)
                }
                try place(entry, position: Int32(position), name: name, limits: limits, bare: bare)
            }
            let directory = reader.directory
            named = directory.sortedByName(named)
            if let repeated = directory.firstRepeat(in: named) {
                let name = directory.keyString(at: repeated)
                throw malformed("the entry '\(name)' appears twice", entry: name)
            }
            // A non-ASCII name whose NFC form is another entry's name: U+212A KELVIN SIGN is "K".
            for name in nonASCII {
                let composed = name.precomposedStringWithCanonicalMapping
                if !composed.utf8.elementsEqual(name.utf8), directory.find(composed, in: named) != nil { throw twins(name) }
            }
            resourcesByName = directory.sortedByName(resourcePositions)
            signaturesByName = directory.sortedByName(signaturesByName, key: signatureKey)
            try requireSignedManifest(bare: bare)
        }

        private func malformed(_ reason: String, entry: String?) -> SignetError {
            SignetError(.malformedArchive, "package '\(path)' is malformed: \(reason)", path: path, entry: entry)
        }

        private func twins(_ name: String) -> SignetError {
            malformed("the entry '\(name)' appears twice after Unicode normalisation (two spellings of one name)", entry: name)
        }

        /// The entry's name, checked as a package path (nil for a directory record).
        private func checkedName(of entry: ZipReader.Entry) throws -> String? {
            let rawName = reader.rawName(of: entry)
            let shown = String(decoding: rawName, as: UTF8.self)
            if rawName.last == UInt8(ascii: "/") {
                guard entry.size == 0, entry.compressedSize <= 2 else {
                    throw malformed("the directory entry '\(shown)' carries data", entry: shown)
                }
                return nil
            }
            let prefix = Array((TreeLayout.directory + "/").utf8)
            let checked = rawName.starts(with: prefix) ? Array(rawName.dropFirst(prefix.count)) : Array(rawName)
            if case .failure(let refusal) = ResourcePath.validate(bytes: checked) {
                throw malformed("the entry name '\(shown)' is forbidden: \(refusal.reason)", entry: shown)
            }
            return shown
        }

        /// What every entry must be: not encrypted, stored or deflated, a regular file, and
        /// within the expansion ratio. (Names stored twice are found once all are read.)
        private func check(_ entry: ZipReader.Entry, name: String, limits: PackageLimits) throws {
            guard !entry.encrypted else { throw malformed("the entry '\(name)' is encrypted", entry: name) }
            guard entry.method == ZipReader.methodStore || entry.method == ZipReader.methodDeflate else {
                throw malformed("the entry '\(name)' uses compression method \(entry.method); only stored and deflated entries are allowed", entry: name)
            }
            if let mode = entry.unixMode, mode & 0o170000 != 0, mode & 0o170000 != 0o100000 {
                let kind = mode & 0o170000 == 0o120000 ? "a symbolic link" : "not a regular file"
                throw malformed("the entry '\(name)' is \(kind)", entry: name)
            }
            if entry.compressedSize == 0 && entry.size > 0 {
                throw malformed("the entry '\(name)' claims \(entry.size) bytes from no compressed data", entry: name)
            }
            if entry.compressedSize > 0, entry.size / entry.compressedSize > limits.maxRatio {
                throw malformed("the entry '\(name)' claims to expand \(entry.size / entry.compressedSize) times (more than \(limits.maxRatio), --max-ratio); refusing a likely deflate bomb", entry: name)
            }
        }

        /// Sorts the entry into the manifest, its signature, certificates, signatures or
        /// resources, counting resources against the file and size limits.
        private mutating func place(_ entry: ZipReader.Entry, position: Int32, name: String, limits: PackageLimits, bare: Bool) throws {
            if bare {
                guard !TreeLayout.isSignetEntry(name) else {
                    throw malformed("'\(name)' is a Signet package entry; install it without --bare", entry: name)
                }
                if name.utf8.count > 4, name.utf8.suffix(4).elementsEqual(".sig".utf8) {
                    signaturesByName.append(position)
                    return
                }
            }
            switch name {
            case TreeLayout.manifest: manifest = entry
            case TreeLayout.manifestSignature: manifestSignature = entry
            case TreeLayout.signatureRecordSignature: recordSignature = entry
            case TreeLayout.signerCertificate:
                signerCertificate = entry
                certificates.append((name, entry))
            default:
                if let resource = TreeLayout.resource(ofSignature: name) {
                    guard case .success = ResourcePath.validate(resource) else {
                        throw malformed("the signature entry '\(name)' does not name a valid resource path", entry: name)
                    }
                    signaturesByName.append(position)
                } else if TreeLayout.chainIndex(of: name) != nil, name.hasPrefix(TreeLayout.certificates + "/") {
                    certificates.append((name, entry))
                    guard certificates.count <= PackageLimits.maximumCertificates else {
                        throw malformed("it carries more than \(PackageLimits.maximumCertificates) certificates", entry: name)
                    }
                } else if TreeLayout.isSignetEntry(name) {
                    throw malformed("unknown entry '\(name)' under .signet/", entry: name)
                } else {
                    resourcePositions.append(position)
                    let (sum, overflow) = total.addingReportingOverflow(entry.size)
                    total = sum
                    guard resourcePositions.count + directoryEntries <= limits.maxFiles else {
                        throw malformed("it holds more than \(limits.maxFiles) resources (--max-files)", entry: nil)
                    }
                    guard !overflow, total <= limits.maxTotalSize else {
                        throw malformed("its resources add up to more than \(limits.maxTotalSize) bytes (--max-total-size)", entry: name)
                    }
                }
            }
        }

        /// A bare package needs resources; any other needs a manifest and its signature.
        private func requireSignedManifest(bare: Bool) throws {
            if bare {
                guard !resourcePositions.isEmpty else { throw malformed("it holds no files", entry: nil) }
                return
            }
            guard manifest != nil else {
                throw SignetError(.packageInvalid, "package '\(path)' has no .signet/manifest.json; if it is an older bare package (FILE + FILE.sig), it needs --bare", path: path, entry: TreeLayout.manifest)
            }
            guard manifestSignature != nil else {
                throw SignetError(.packageInvalid, "package '\(path)' has no .signet/manifest.json.sig: it is not signed", path: path, entry: TreeLayout.manifestSignature)
            }
        }

        func contents(manifest: Manifest) -> PackageContents {
            PackageContents(path: path, resources: .init(directory: directory, positions: resourcePositions, byName: resourcesByName),
                            manifest: manifest, hasSignerCertificate: signerCertificate != nil)
        }
    }
}

extension PackageReader {
    // Swift-native forms (issue 41): FilePath paths.
    /// Reads a package's manifest and entries without verifying them.
    public static func contents(of path: FilePath, limits: PackageLimits = PackageLimits()) throws -> PackageContents {
        try contents(of: path.string, limits: limits)
    }

    /// Verifies a package file without installing it.
    public static func verify(_ path: FilePath, policy: TrustPolicy, limits: PackageLimits = PackageLimits(),
                              now: Timestamp = .now, progress handler: ProgressHandler? = nil) throws -> PackageVerification {
        try verify(path.string, policy: policy, limits: limits, now: now, progress: handler)
    }
}
