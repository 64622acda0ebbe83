#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetSystem
public import SystemPackage
import SignetCore
import SignetCrypto
import SignetManifest
import SignetArchive

/// Makes packages (FORMAT.md §2): resources, one signature each, and a signed manifest, in a zip.
public enum PackageBuilder {
    /// What ``pack(_:to:signer:options:)-(_,String,_,_)`` made.
    public struct Result: Sendable {
        /// The manifest as written.
        public let manifest: Manifest
        /// The package file.
        public let path: String
        /// Whether each resource was deflated, in manifest order.
        private let deflated: [Bool]
        /// Each resource's size in the archive, by resource path, as the written central
        /// directory records it (what `inspect` reports).
        public let compressedSizes: [String: UInt64]

        init(manifest: Manifest, path: String, deflated: [Bool], compressedSizes: [String: UInt64] = [:]) {
            self.manifest = manifest
            self.path = path
            self.deflated = deflated
            self.compressedSizes = compressedSizes
        }

        /// How each resource was stored, by resource path.
        public var compression: [String: StorageMethod] {
            Dictionary(uniqueKeysWithValues: zip(manifest.files, deflated).map { ($0.path, $1 ? .deflated : .stored) })
        }
    }

    /// Packs files and directories (recursively) into a package at `output`.
    ///
    /// A file PATH becomes a resource named after the file; a directory PATH contributes its
    /// contents, named relative to that directory. Each resource is read once: libzip pulls it
    /// through a source that hashes it as it is compressed, and its signature and the manifest are
    /// made once the bytes they cover have gone by. The package is written to a temporary file
    /// beside `output`, flushed, and renamed into place, so a failed pack leaves nothing behind.
    public static func pack(_ paths: [String], to output: String, signer: Signer, options: PackOptions) throws -> Result {
        try pack(paths, to: output, signer: signer, options: options, workers: System.activeProcessorCount)
    }

    /// `workers`: how many threads deflate (1 keeps everything inside libzip's zip_close).
    static func pack(_ paths: [String], to output: String, signer: Signer, options: PackOptions, workers: Int) throws -> Result {
        try validate(options, signer: signer)
        try PackOptions.checkSourceDateEpoch()
        var inputs = try collect(paths, followSymlinks: options.followSymlinks, exclude: options.exclude)
        inputs = withoutOwnOutput(inputs, output: output, named: paths)
        if inputs.isEmpty, !options.exclude.isEmpty {
            throw SignetError(.usage, "--exclude leaves no file to pack; narrow the patterns")
        }
        try checkLimits(inputs, options: options)
        try FileIdentity.refuseOverwriting(
            targets: [output], inputs: inputs.map { ($0.diskPath, "resource being packed") } + options.protecting.map { ($0, "input") },
            what: "the package")
        if !options.replace { try AtomicFile.refuseExisting(output, what: "the package") }
        let created = options.created ?? PackOptions.sourceDateEpoch ?? .now
        if let expires = options.expires, expires <= created {
            throw SignetError(.usage, "--expires \(expires) is not after the package's creation time \(created)")
        }
        let sequence = options.sequence ?? UInt64(max(0, (PackOptions.sourceDateEpoch ?? .now).secondsSinceEpoch))

        let written = try PackageOutput(output, tag: "pack", what: "the package")
        let temporary = written.temporary
        let archive = written.archive
        // Sign, then encrypt (FORMAT.md §8): the package is sealed as libzip writes it, into the
        // encrypted package's payload; the envelope is made first, so a bad certificate or a
        // refused recipient costs nothing.
        let sealing = try options.encryptTo.isEmpty ? nil : EncryptedPackage.Sealing(for: options, output: output, into: archive)

        // Judging a file reads a little of it (all of a small one): on every core.
        let compression = options.compression
        let methods = try parallelMap(inputs) { input in Swift.Result { try CompressionPolicy.choose(for: input, policy: compression) } }.map { try $0.get() }
        // Large resources get a chunk index: a stored one's bytes are read by range at their own
        // offsets; a deflated one is deflated in segments (a sync flush every 8 KiB of the
        // file) whose compressed offsets the manifest lists, so that its parts are addressable
        // too.
        let chunked = inputs.indices.map { index in options.chunkThreshold.map { inputs[index].size >= $0 } == true }
        let ledger = PackLedger(
            inputs: inputs, signer: signer,
            structured: try StructuredResources.check(inputs, patterns: options.structured, followSymlinks: options.followSymlinks),
            progress: options.progress, chunked: chunked, verity: options.verity)
        let segmentedIndices = inputs.indices.filter { chunked[$0] && methods[$0] != .store }
        let segmentedLevel: Int32 = if case .automatic(let level) = compression { Int32(level) } else { 6 }
        let segmented = try SegmentedDeflate(ledger: ledger, indices: segmentedIndices, level: segmentedLevel, besides: output)
        defer { segmented.remove() }
        // Deflate is the slow part and libzip runs it on one thread, so independent files are
        // compressed on every core first, each worker into its own temporary archive beside the
        // output; the package then copies those deflate streams as they are.
        var others = methods
        for index in segmentedIndices { others[index] = .store }
        let precompressed = try ParallelDeflate(ledger: ledger, methods: others, besides: output, workers: workers)
        defer { precompressed.remove() }

        let writer = try ZipWriter(writingTo: archive)
        for (index, input) in inputs.enumerated() {
            let source = segmented.source(for: index) ?? precompressed.source(for: index) ?? ResourceSource(ledger, index: index)
            try writer.add(input.packagePath, source: source, compression: methods[index], permissions: input.mode.permissions)
        }
        // Everything below is made inside zip_close, after the resources it covers were read.
        // The chunked resources' indexes go into the chunk-index entry, read (and so made)
        // before the manifest, which binds its slices (FORMAT.md §2).
        var files: [Manifest.File]? = nil
        var chunkIndex: ChunkIndexEntry? = nil
        let makeChunkIndex = { () throws -> [UInt8] in
            var made = try ledger.manifestFiles()
            let entry = try ChunkIndexEntry.make(&made)
            files = made
            chunkIndex = entry?.entry
            return entry?.bytes ?? []
        }
        if chunked.contains(true) {
            try writer.add(TreeLayout.chunkIndex, source: DeferredBytesSource(makeChunkIndex), compression: .store, permissions: 0o644)
        }
        var manifestBytes: [UInt8] = []
        var manifest: Manifest?
        let makeManifest = { () throws -> [UInt8] in
            var made = Manifest(
                algorithm: signer.algorithm, created: created, expires: options.expires, files: try files ?? ledger.manifestFiles(),
                keyID: signer.key.keyID, name: options.name, sequence: sequence, version: options.version)
            made.chunkIndex = chunkIndex
            manifest = made
            manifestBytes = try made.encoded()
            guard manifestBytes.count <= options.limits.maxManifestSize else {
                throw SignetError(
                    .usage,
                    "the manifest would be \(manifestBytes.count) bytes, more than the \(options.limits.maxManifestSize) unpack reads; pack fewer files or shorter paths"
                )
            }
            return manifestBytes
        }
        try writer.add(TreeLayout.manifest, source: DeferredBytesSource(makeManifest), compression: .deflate(level: 6), permissions: 0o644)
        try writer.add(
            TreeLayout.manifestSignature,
            source: DeferredBytesSource {
                try signer.sign(manifestBytes).bytes
            }, compression: .store, permissions: 0o644)
        for (index, input) in inputs.enumerated() {
            try writer.add(
                TreeLayout.signature(of: input.packagePath), source: SignatureEntrySource(ledger, index: index), compression: .store, permissions: 0o644)
        }
        // Made once every signature entry above was written (libzip reads sources in order).
        try writer.add(
            TreeLayout.signatureRecordSignature, source: DeferredBytesSource { try ledger.recordSignature() }, compression: .store, permissions: 0o644)
        if let certificate = options.certificate ?? signer.key.certificateDER {
            try writer.add(TreeLayout.signerCertificate, source: DeferredBytesSource { certificate }, compression: .store, permissions: 0o644)
        }
        for (index, intermediate) in options.chain.enumerated() {
            try writer.add(TreeLayout.chainCertificate(index + 1), source: DeferredBytesSource { intermediate }, compression: .store, permissions: 0o644)
        }
        try writer.close()

        // What a client's unpack checks before it trusts anything, checked here on the bytes
        // written: the archive's structure and each entry's expansion ratio (of an encrypted
        // package, the package inside, read back through its key).
        let check = try sealing.map { try $0.finish(temporary) } ?? InputFile.open(temporary, what: "package")
        let compressedSizes = try checkWritten(check, output: output, limits: options.limits, inputs: inputs)
        // Most of it is already on its way to disk (the output starts writeback as it goes).
        try written.commit(replace: options.replace, what: "the package")
        ledger.progress?.finish()
        guard let manifest else { throw SignetError(.io, "the manifest was not written", path: output) }
        return Result(manifest: manifest, path: output, deflated: methods.map { $0 != .store }, compressedSizes: compressedSizes)
    }

    /// The limits that can be judged before anything is written: file count, total size, path
    /// lengths (a signature entry `.signet/sigs/PATH.sig` must fit the name limit too).
    static func checkLimits(_ inputs: [PackInput], options: PackOptions) throws {
        let limits = options.limits
        guard inputs.count <= limits.maxFiles else {
            throw SignetError(
                .usage,
                "\(inputs.count) files are more than the \(limits.maxFiles) unpack accepts; give pack and the clients' unpack the same --max-files \(inputs.count) to allow it"
            )
        }
        var total: UInt64 = 0
        for input in inputs {
            let (sum, overflow) = total.addingReportingOverflow(input.size)
            guard !overflow, sum <= limits.maxTotalSize else {
                throw SignetError(
                    .usage,
                    "the files add up to more than the \(limits.maxTotalSize) bytes unpack accepts; give pack and the clients' unpack the same larger --max-total-size to allow it"
                )
            }
            total = sum
        }
        guard options.chain.count < PackageLimits.maximumCertificates else {
            throw SignetError(.usage, "--chain takes at most \(PackageLimits.maximumCertificates - 1) intermediate certificates")
        }
    }

    /// Reads back the central directory of the package just written, as unpack will, and holds
    /// every entry to the expansion-ratio limit.
    /// Returns each resource's compressed size, by its path in the package.
    @discardableResult
    static func checkWritten(_ file: any ArchiveInput, output: String, limits: PackageLimits, inputs: [PackInput]) throws -> [String: UInt64] {
        let directory = try CentralDirectory.records(of: file, archive: output, maximumEntries: limits.maximumEntries)
        var sizes: [String: UInt64] = [:]
        sizes.reserveCapacity(inputs.count)
        // Resources come first, in the inputs' order (the entries under .signet/ follow).
        for (record, input) in zip(directory, inputs) where directory.shownName(of: record) == input.packagePath {
            sizes[input.packagePath] = record.compressedSize
        }
        for record in directory where record.compressedSize > 0 && record.size / record.compressedSize > limits.maxRatio {
            let name = directory.shownName(of: record)
            throw SignetError(
                .usage,
                "'\(name)' compresses \(record.size / record.compressedSize) times, more than the \(limits.maxRatio) unpack accepts (it would take it for a deflate bomb); pack it with --store, or give pack and the clients' unpack the same --max-ratio",
                path: inputs.first { $0.packagePath == name }?.diskPath)
        }
        return sizes
    }

    static func validate(_ options: PackOptions, signer: Signer) throws {
        if let certificate = options.certificate {
            let key = try PublicKey(bytes: certificate, name: "--cert", allowWeakKey: true)
            guard key.keyID == signer.key.keyID, key.certificateDER != nil else {
                throw SignetError(
                    .usage, "--cert is not a certificate for the signing key (it certifies key \(key.keyID.short), the key is \(signer.key.keyID.short))")
            }
        }
        if !options.chain.isEmpty && options.certificate == nil && signer.key.certificateDER == nil {
            throw SignetError(.usage, "--chain needs the signer certificate (--cert)")
        }
        for (field, value) in [("name", options.name), ("version", options.version)] {
            guard !value.isEmpty, value.utf8.count <= 255 else {
                throw SignetError(.usage, "--\(field) must be 1 to 255 bytes, not \(value.utf8.count)")
            }
            guard !value.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7f...0x9f).contains($0.value) }) else {
                throw SignetError(.usage, "--\(field) may not contain control characters")
            }
        }
        if case .automatic(let level) = options.compression, !(1...9).contains(level) {
            throw SignetError(.usage, "--compression-level must be 1 to 9, not \(level)")
        }
    }

    /// The inputs without the package's own output where a walked directory holds it (`cd src &&
    /// signet pack . --out r.zip`, run twice): skipped, as zip and tar skip their own archive.
    /// Named on the command line itself, it stays, and is refused as an input to overwrite.
    static func withoutOwnOutput(_ inputs: [PackInput], output: String, named: [String]) -> [PackInput] {
        guard let own = FileIdentity.of(output, followLinks: false) else { return inputs }
        if named.contains(where: { FileIdentity.of($0) == own }) { return inputs }
        let name = output.split(separator: "/").last.map(String.init) ?? output
        return inputs.filter { input in
            !(input.diskPath.hasSuffix(name) && FileIdentity.of(input.diskPath, followLinks: false) == own)
        }
    }

    /// Walks the inputs: regular files only, sorted by the bytes of their package paths, with no
    /// two resources under one name (also after Unicode normalisation). A file or folder whose
    /// package path an `exclude` pattern matches (``PackOptions/exclude``) is left out, and an
    /// excluded folder is not walked.
    public static func collect(_ paths: [String], followSymlinks: Bool, exclude: [String] = []) throws -> [PackInput] {
        guard !paths.isEmpty else { throw SignetError(.usage, "name at least one file or directory to pack") }
        var inputs: [PackInput] = []
        for path in paths {
            let info = try inspect(path, followSymlinks: followSymlinks)
            switch info.st_mode & S_IFMT {
            case S_IFREG:
                let name = path.split(separator: "/").last.map(String.init) ?? path
                if exclude.contains(where: { ResourcePath.matches(pattern: $0, name) }) { continue }
                inputs.append(try input(diskPath: path, packagePath: name, info: info))
            case S_IFDIR:
                var visited = Set<[UInt64]>()
                try walk(directory: path, prefix: "", followSymlinks: followSymlinks, exclude: exclude, visited: &visited, into: &inputs)
            default:
                throw notRegular(path, info.st_mode)
            }
        }
        inputs.sort { ResourcePath.byteOrder($0.packagePath, $1.packagePath) }
        // Swift compares Strings by canonical equivalence, so NFC/NFD twins meet here too.
        var seen: [String: PackInput] = [:]
        for input in inputs {
            if let other = seen[input.packagePath] {
                if other.diskPath.utf8.elementsEqual(input.diskPath.utf8) {
                    throw SignetError(
                        .usage, "'\(input.diskPath)' is given twice (or inside a directory that is also given); give each file once", path: input.diskPath)
                }
                let same = other.packagePath.utf8.elementsEqual(input.packagePath.utf8)
                throw SignetError(
                    .usage,
                    "'\(other.diskPath)' and '\(input.diskPath)' would both be '\(input.packagePath)' in the package\(same ? "" : " (the two names differ only in Unicode normalisation)"); rename one",
                    path: input.diskPath)
            }
            seen[input.packagePath] = input
        }
        return inputs
    }

    /// Walks a directory one folder at a time, without recursion (no depth exhausts a thread's
    /// stack) and holding one folder's descriptor at a time (no depth exhausts descriptors);
    /// folders are opened in pieces where their path is longer than PATH_MAX.
    private static func walk(
        directory: String, prefix: String, followSymlinks: Bool, exclude: [String],
        visited: inout Set<[UInt64]>, into inputs: inout [PackInput]
    ) throws {
        var pending: [(path: String, prefix: String)] = [(directory, prefix)]
        while let (directory, prefix) = pending.popLast() {
            let opened: OwnedDescriptor
            let entries: [DirectoryEntries.Entry]
            do {
                opened = try Paths.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (followSymlinks || prefix.isEmpty ? 0 : O_NOFOLLOW))
            } catch {
                throw SignetError.posix(error, "cannot read directory", path: directory)
            }
            let fd = opened.descriptor
            do {
                let info = try fd.status()
                guard visited.insert([UInt64(info.st_dev), UInt64(info.st_ino)]).inserted else {
                    throw SignetError(.usage, "'\(directory)' leads back to a directory already being packed (a symbolic link loop)", path: directory)
                }
                entries = try DirectoryEntries.list(fd)
            } catch let failure as SystemCallFailure {
                throw SignetError.posix(failure, "cannot read directory", path: directory)
            }
            for entry in entries {
                guard let name = String(validating: entry.rawName.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self) else {
                    throw SignetError(.usage, "a file name in '\(directory)' is not valid UTF-8; package paths must be UTF-8", path: directory)
                }
                // Exactly sized: `+` leaves growth room in each of 50,000 paths kept until the end.
                let child = directory.hasSuffix("/") ? String(joining: directory, name) : String(joining: directory, "/", name)
                let packagePath = prefix.isEmpty ? name : String(joining: prefix, "/", name)
                if !exclude.isEmpty, exclude.contains(where: { ResourcePath.matches(pattern: $0, packagePath) }) { continue }
                var childInfo = stat()
                do {
                    _ = try systemCall("fstatat") { fstatat(fd.rawValue, name, &childInfo, AT_SYMLINK_NOFOLLOW) }
                } catch {
                    throw SignetError.posix(error, "cannot pack", path: child)
                }
                if childInfo.st_mode & S_IFMT == S_IFLNK {
                    guard followSymlinks else { throw symlinkRefused(child) }
                    do {
                        _ = try systemCall("fstatat") { fstatat(fd.rawValue, name, &childInfo, 0) }
                    } catch {
                        throw SignetError.posix(error, "cannot follow the symbolic link", path: child)
                    }
                }
                switch childInfo.st_mode & S_IFMT {
                case S_IFREG: inputs.append(try input(diskPath: child, packagePath: packagePath, info: childInfo))
                case S_IFDIR: pending.append((child, packagePath))
                default: throw notRegular(child, childInfo.st_mode)
                }
            }
        }
    }

    /// lstat, refusing a symbolic link unless links are followed (then stat of the target).
    private static func inspect(_ path: String, followSymlinks: Bool) throws -> stat {
        let info: stat
        do { info = try Paths.lstat(path) } catch {
            throw SignetError.posix(error, "cannot pack", path: path)
        }
        guard info.st_mode & S_IFMT == S_IFLNK else { return info }
        guard followSymlinks else { throw symlinkRefused(path) }
        do {
            let target = try Paths.open(path, signet_O_PATH() | O_CLOEXEC)
            return try target.descriptor.status()
        } catch {
            throw SignetError.posix(error, "cannot follow the symbolic link", path: path)
        }
    }

    private static func input(diskPath: String, packagePath: String, info: stat) throws -> PackInput {
        if case .failure(let refusal) = ResourcePath.validateResource(packagePath) {
            throw SignetError(.usage, "cannot pack '\(diskPath)' as '\(packagePath)': \(refusal.reason)", path: diskPath)
        }
        let executable = info.st_mode & S_IXUSR != 0
        return PackInput(diskPath: diskPath, packagePath: packagePath, size: UInt64(info.st_size), mode: executable ? .executable : .regular)
    }

    private static func symlinkRefused(_ path: String) -> SignetError {
        SignetError(
            .usage,
            "'\(path)' is a symbolic link; packages hold regular files only. Replace it with the file, or pass --follow-symlinks to pack what it points to",
            path: path)
    }

    private static func notRegular(_ path: String, _ mode: mode_t) -> SignetError {
        let kind =
            switch mode & S_IFMT {
            case S_IFSOCK: "a socket"
            case S_IFIFO: "a FIFO"
            case S_IFCHR: "a character device"
            case S_IFBLK: "a block device"
            default: "not a regular file"
            }
        return SignetError(.usage, "'\(path)' is \(kind); packages hold regular files only", path: path)
    }
}

extension String {
    /// The parts one after another, in storage of exactly their size (`a + b` keeps room to grow).
    init(joining parts: String...) {
        let count = parts.reduce(0) { $0 + $1.utf8.count }
        self.init(unsafeUninitializedCapacity: count) { buffer in
            var at = 0
            for part in parts {
                for byte in part.utf8 { buffer[at] = byte; at += 1 }
            }
            return at
        }
    }
}

// MARK: Swift-native forms: FilePath and URL paths, DataProtocol bytes

extension PackageBuilder {
    /// Packs files and directories into a package at `output`.
    public static func pack(_ paths: [FilePath], to output: FilePath, signer: Signer, options: PackOptions) throws -> Result {
        try pack(paths.map(\.string), to: output.string, signer: signer, options: options)
    }
}
