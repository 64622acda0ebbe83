#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetShims
internal import SystemPackage

/// Options for ``PackageBuilder/pack(_:to:signer:options:)``.
public struct PackOptions: Sendable {
    /// How resources are compressed.
    public enum Compression: Sendable, Equatable {
        /// Deflate at `level` (1-9), except already-compressed types and data that deflate
        /// would not shrink, which are stored.
        case automatic(level: Int)
        /// Store everything.
        case store
    }

    /// The package name (`name` in the manifest).
    public var name: String
    /// The version string.
    public var version: String
    /// Release counter; nil for `SOURCE_DATE_EPOCH` or the current UNIX time.
    public var sequence: UInt64?
    /// Expiry; nil for none.
    public var expires: Timestamp?
    /// `created`; nil for `SOURCE_DATE_EPOCH` or now.
    public var created: Timestamp?
    /// Compression policy.
    public var compression: Compression
    /// Pack what symbolic links in the inputs point to instead of refusing them.
    public var followSymlinks: Bool
    /// The signer's X.509 certificate (DER), stored as `.signet/certs/signer.der`. Its key must
    /// be the signing key. Nil: a certificate that came with the key (PKCS#12), if any.
    public var certificate: [UInt8]? = nil
    /// Intermediate certificates (DER), leaf-most first, stored as `.signet/certs/chain-<n>.der`.
    public var chain: [[UInt8]] = []
    /// The limits the package is held to: those of the clients' unpack (default: unpack's
    /// defaults). A package beyond them is refused (`.usage`, naming the flag), never made.
    public var limits = PackageLimits()
    /// Files the package must never replace, besides the resources (the key, certificates):
    /// an output that is one of them (by device and inode) is refused.
    public var protecting: [String] = []
    /// Whether an existing file at the output is replaced (the CLI's `--force`); when false it
    /// is refused before anything is read (``SignetError/Code/fileExists``).
    public var replace = true
    /// Glob patterns (`.gitignore`'s rules, as `reverify --exclude` reads them: FORMAT.md §4,
    /// "Patterns") of JSON and property list resources that are parsed now and recorded as
    /// structured, so that re-verification can compare them key by key.
    public var structured: [String] = []
    /// Told how many files and bytes have been read and packed, from pack's threads.
    public var progress: ProgressHandler? = nil

    /// Creates options.
    public init(name: String, version: String, sequence: UInt64? = nil, expires: Timestamp? = nil, created: Timestamp? = nil,
                compression: Compression = .automatic(level: 6), followSymlinks: Bool = false) {
        self.name = name
        self.version = version
        self.sequence = sequence
        self.expires = expires
        self.created = created
        self.compression = compression
        self.followSymlinks = followSymlinks
    }

    /// `SOURCE_DATE_EPOCH` from the environment, if set to a valid number of seconds that a
    /// manifest can express (up to 9999-12-31).
    public static var sourceDateEpoch: Timestamp? {
        guard let text = getenv("SOURCE_DATE_EPOCH").map({ String(cString: $0) }), let seconds = Int64(text), seconds >= 0,
              Timestamp.representable.contains(seconds) else { return nil }
        return Timestamp(secondsSinceEpoch: seconds)
    }

    /// Refuses a `SOURCE_DATE_EPOCH` that is set but unusable, rather than silently ignoring it
    /// (the package would not be reproducible) or writing a time no verifier can read.
    static func checkSourceDateEpoch() throws {
        guard let text = getenv("SOURCE_DATE_EPOCH").map({ String(cString: $0) }), !text.isEmpty, sourceDateEpoch == nil else { return }
        throw SignetError(.usage, "SOURCE_DATE_EPOCH is '\(text)'; it must be a whole number of seconds from 0 to \(Timestamp.representable.upperBound) (9999-12-31)")
    }
}

/// One resource to pack: where it is on disk and where it goes in the package.
public struct PackInput: Sendable, Equatable {
    /// The file on disk.
    public let diskPath: String
    /// The resource path in the package.
    public let packagePath: String
    /// Its size when the inputs were collected.
    public let size: UInt64
    /// Its mode in the manifest.
    public let mode: Manifest.FileMode
}

/// Makes packages (FORMAT.md §2): resources, one signature each, and a signed manifest, in a zip.
public enum PackageBuilder {
    /// What ``pack(_:to:signer:options:)`` made.
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
        var inputs = try collect(paths, followSymlinks: options.followSymlinks)
        inputs = withoutOwnOutput(inputs, output: output, named: paths)
        try checkLimits(inputs, options: options)
        try FileIdentity.refuseOverwriting(targets: [output], inputs: inputs.map { ($0.diskPath, "resource being packed") } + options.protecting.map { ($0, "input") },
                                           what: "the package")
        if !options.replace { try AtomicFile.refuseExisting(output, what: "the package") }
        let created = options.created ?? PackOptions.sourceDateEpoch ?? .now
        if let expires = options.expires, expires <= created {
            throw SignetError(.usage, "--expires \(expires) is not after the package's creation time \(created)")
        }
        let sequence = options.sequence ?? UInt64(max(0, (PackOptions.sourceDateEpoch ?? .now).secondsSinceEpoch))

        let directory = AtomicFile.parentDirectory(of: output)
        // What an interrupted or killed pack of the same output left (its process is gone).
        TemporaryFiles.removeStale(besides: output)
        let temporary = TemporaryFiles.name(besides: output, tag: "pack")
        let token = TemporaryFiles.register(temporary)
        defer { TemporaryFiles.unregister(token) }
        let fd: Int32
        do {
            fd = try TemporaryFiles.guardedCall { () in
                try Paths.open(temporary, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
            }.get()
        } catch let failure as SystemCallFailure {
            throw SignetError.posix(failure, "cannot create the package beside", path: output)
        }
        let archive = ArchiveOutput(descriptor: fd, path: output)
        var committed = false
        defer { if !committed { unlink(temporary) } }

        let ledger = PackLedger(inputs: inputs, signer: signer,
                                structured: try StructuredResources.check(inputs, patterns: options.structured, followSymlinks: options.followSymlinks),
                                progress: options.progress)
        // Judging a file reads a little of it (all of a small one): on every core.
        let compression = options.compression
        let methods = try parallelMap(inputs) { input in Swift.Result { try CompressionPolicy.choose(for: input, policy: compression) } }.map { try $0.get() }
        // Deflate is the slow part and libzip runs it on one thread, so independent files are
        // compressed on every core first, each worker into its own temporary archive beside the
        // output; the package then copies those deflate streams as they are.
        let precompressed = try ParallelDeflate(ledger: ledger, methods: methods, besides: output, workers: workers)
        defer { precompressed.remove() }

        let writer = try ZipWriter(writingTo: archive)
        for (index, input) in inputs.enumerated() {
            let source = precompressed.source(for: index) ?? ResourceSource(ledger, index: index)
            try writer.add(input.packagePath, source: source, compression: methods[index], permissions: input.mode.permissions)
        }
        // Everything below is made inside zip_close, after the resources it covers were read.
        var manifestBytes: [UInt8] = []
        var manifest: Manifest?
        let makeManifest = { () throws -> [UInt8] in
            let made = Manifest(algorithm: signer.algorithm, created: created, expires: options.expires, files: try ledger.manifestFiles(),
                                keyID: signer.key.keyID, name: options.name, sequence: sequence, version: options.version)
            manifest = made
            manifestBytes = try made.encoded()
            guard manifestBytes.count <= options.limits.maxManifestSize else {
                throw SignetError(.usage, "the manifest would be \(manifestBytes.count) bytes, more than the \(options.limits.maxManifestSize) unpack reads; pack fewer files or shorter paths")
            }
            return manifestBytes
        }
        try writer.add(TreeLayout.manifest, source: DeferredBytesSource(makeManifest), compression: .deflate(level: 6), permissions: 0o644)
        try writer.add(TreeLayout.manifestSignature, source: DeferredBytesSource {
            try signer.sign(manifestBytes).bytes
        }, compression: .store, permissions: 0o644)
        for (index, input) in inputs.enumerated() {
            try writer.add(TreeLayout.signature(of: input.packagePath), source: SignatureEntrySource(ledger, index: index), compression: .store, permissions: 0o644)
        }
        // Made once every signature entry above was written (libzip reads sources in order).
        try writer.add(TreeLayout.signatureRecordSignature, source: DeferredBytesSource { try ledger.recordSignature() }, compression: .store, permissions: 0o644)
        if let certificate = options.certificate ?? signer.key.certificateDER {
            try writer.add(TreeLayout.signerCertificate, source: DeferredBytesSource { certificate }, compression: .store, permissions: 0o644)
        }
        for (index, intermediate) in options.chain.enumerated() {
            try writer.add(TreeLayout.chainCertificate(index + 1), source: DeferredBytesSource { intermediate }, compression: .store, permissions: 0o644)
        }
        try writer.close()

        // What a client's unpack checks before it trusts anything, checked here on the bytes
        // written: the archive's structure and each entry's expansion ratio.
        let compressedSizes = try checkWritten(temporary, output: output, limits: options.limits, inputs: inputs)
        // Most of it is already on its way to disk (ArchiveOutput starts writeback as it goes).
        try archive.sync()
        do {
            if options.replace {
                _ = try TemporaryFiles.guardedCall("rename") { rename(temporary, output) }.get()
            } else {
                try TemporaryFiles.guarded { try AtomicFile.renameNoReplace(temporary, output, what: "the package") }
            }
        } catch let failure as SystemCallFailure {
            throw SignetError.posix(failure, "cannot write the package", path: output)
        }
        committed = true
        AtomicFile.syncDirectory(directory)
        ledger.progress?.finish()
        guard let manifest else { throw SignetError(.io, "the manifest was not written", path: output) }
        return Result(manifest: manifest, path: output, deflated: methods.map { $0 != .store }, compressedSizes: compressedSizes)
    }

    /// The limits that can be judged before anything is written: file count, total size, path
    /// lengths (a signature entry `.signet/sigs/PATH.sig` must fit the name limit too).
    static func checkLimits(_ inputs: [PackInput], options: PackOptions) throws {
        let limits = options.limits
        guard inputs.count <= limits.maxFiles else {
            throw SignetError(.usage, "\(inputs.count) files are more than the \(limits.maxFiles) unpack accepts; give pack and the clients' unpack the same --max-files \(inputs.count) to allow it")
        }
        var total: UInt64 = 0
        for input in inputs {
            let (sum, overflow) = total.addingReportingOverflow(input.size)
            guard !overflow, sum <= limits.maxTotalSize else {
                throw SignetError(.usage, "the files add up to more than the \(limits.maxTotalSize) bytes unpack accepts; give pack and the clients' unpack the same larger --max-total-size to allow it")
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
    static func checkWritten(_ temporary: String, output: String, limits: PackageLimits, inputs: [PackInput]) throws -> [String: UInt64] {
        let file = try InputFile.open(temporary, what: "package")
        let directory = try CentralDirectory.records(of: file, archive: output, maximumEntries: limits.maximumEntries)
        var sizes: [String: UInt64] = [:]
        sizes.reserveCapacity(inputs.count)
        // Resources come first, in the inputs' order (the entries under .signet/ follow).
        for (record, input) in zip(directory, inputs) where directory.shownName(of: record) == input.packagePath {
            sizes[input.packagePath] = record.compressedSize
        }
        for record in directory where record.compressedSize > 0 && record.size / record.compressedSize > limits.maxRatio {
            let name = directory.shownName(of: record)
            throw SignetError(.usage, "'\(name)' compresses \(record.size / record.compressedSize) times, more than the \(limits.maxRatio) unpack accepts (it would take it for a deflate bomb); pack it with --store, or give pack and the clients' unpack the same --max-ratio", path: inputs.first { $0.packagePath == name }?.diskPath)
        }
        return sizes
    }

    static func validate(_ options: PackOptions, signer: Signer) throws {
        if let certificate = options.certificate {
            let key = try PublicKey(bytes: certificate, name: "--cert", allowWeakKey: true)
            guard key.keyID == signer.key.keyID, key.certificateDER != nil else {
                throw SignetError(.usage, "--cert is not a certificate for the signing key (it certifies key \(key.keyID.short), the key is \(signer.key.keyID.short))")
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
    /// two resources under one name (also after Unicode normalisation).
    public static func collect(_ paths: [String], followSymlinks: Bool) throws -> [PackInput] {
        guard !paths.isEmpty else { throw SignetError(.usage, "name at least one file or directory to pack") }
        var inputs: [PackInput] = []
        for path in paths {
            let info = try inspect(path, followSymlinks: followSymlinks)
            switch info.st_mode & S_IFMT {
            case S_IFREG:
                let name = path.split(separator: "/").last.map(String.init) ?? path
                inputs.append(try input(diskPath: path, packagePath: name, info: info))
            case S_IFDIR:
                var visited = Set<[UInt64]>()
                try walk(directory: path, prefix: "", followSymlinks: followSymlinks, visited: &visited, into: &inputs)
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
                    throw SignetError(.usage, "'\(input.diskPath)' is given twice (or inside a directory that is also given); give each file once", path: input.diskPath)
                }
                let same = other.packagePath.utf8.elementsEqual(input.packagePath.utf8)
                throw SignetError(.usage, "'\(other.diskPath)' and '\(input.diskPath)' would both be '\(input.packagePath)' in the package\(same ? "" : " (the two names differ only in Unicode normalisation)"); rename one", path: input.diskPath)
            }
            seen[input.packagePath] = input
        }
        return inputs
    }

    /// Walks a directory one folder at a time, without recursion (no depth exhausts a thread's
    /// stack) and holding one folder's descriptor at a time (no depth exhausts descriptors);
    /// folders are opened in pieces where their path is longer than PATH_MAX.
    private static func walk(directory: String, prefix: String, followSymlinks: Bool, visited: inout Set<[UInt64]>, into inputs: inout [PackInput]) throws {
        var pending: [(path: String, prefix: String)] = [(directory, prefix)]
        while let (directory, prefix) = pending.popLast() {
            let fd: Int32
            let entries: [DirectoryEntries.Entry]
            do {
                fd = try Paths.open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (followSymlinks || prefix.isEmpty ? 0 : O_NOFOLLOW))
            } catch {
                throw SignetError.posix(error, "cannot read directory", path: directory)
            }
            defer { close(fd) }
            do {
                let info = try FileDescriptor(fd).status()
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
                var childInfo = stat()
                do {
                    _ = try systemCall("fstatat") { fstatat(fd, name, &childInfo, AT_SYMLINK_NOFOLLOW) }
                } catch {
                    throw SignetError.posix(error, "cannot pack", path: child)
                }
                if childInfo.st_mode & S_IFMT == S_IFLNK {
                    guard followSymlinks else { throw symlinkRefused(child) }
                    do {
                        _ = try systemCall("fstatat") { fstatat(fd, name, &childInfo, 0) }
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
            let fd = FileDescriptor(try Paths.open(path, signet_O_PATH() | O_CLOEXEC))
            defer { try? fd.close() }
            return try fd.status()
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
        SignetError(.usage, "'\(path)' is a symbolic link; packages hold regular files only. Replace it with the file, or pass --follow-symlinks to pack what it points to", path: path)
    }

    private static func notRegular(_ path: String, _ mode: mode_t) -> SignetError {
        let kind = switch mode & S_IFMT {
        case S_IFSOCK: "a socket"
        case S_IFIFO: "a FIFO"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        default: "not a regular file"
        }
        return SignetError(.usage, "'\(path)' is \(kind); packages hold regular files only", path: path)
    }
}

/// Compresses the deflated resources of a package on all cores before the package is written.
///
/// Files are spread over one worker per core (largest first, each to the least loaded worker).
/// Each worker writes its files into a private temporary zip beside the output; libzip reads
/// each file once, through the same hashing source the package uses, so the digests are in the
/// ledger when the package needs them. zlib is deterministic: the package is byte-identical to one
/// compressed on a single thread.
final class ParallelDeflate {
    private var paths: [String] = []
    private var tokens: [Int] = []
    private var archives: [InputFile] = []
    /// Where each input's deflate stream is, if it was compressed here (32 bytes per input).
    private var placement: [Placement?] = []

    private struct Placement {
        let worker: UInt16
        let crc: UInt32
        let localHeaderOffset: UInt64
        let compressedSize: UInt64
    }

    private let ledger: PackLedger

    init(ledger: PackLedger, methods: [ZipCompression], besides output: String, workers: Int = System.activeProcessorCount) throws {
        self.ledger = ledger
        let inputs = ledger.inputs
        let deflated = inputs.indices.filter { methods[$0] != .store }
        let count = min(workers, deflated.count, Int(UInt16.max))
        guard count >= 2, inputs.count <= Int(UInt32.max) else { return }
        var shares = [[Int]](repeating: [], count: count)
        var loads = [UInt64](repeating: 0, count: count)
        for index in deflated.sorted(by: { inputs[$0].size > inputs[$1].size }) {
            let lightest = loads.indices.min { loads[$0] < loads[$1] }!
            shares[lightest].append(index)
            loads[lightest] += inputs[index].size + 4096
        }
        for _ in 0..<count {
            let path = TemporaryFiles.name(besides: output, tag: "deflate")
            tokens.append(TemporaryFiles.register(path))
            let opened = try TemporaryFiles.guardedCall { () in
                try Paths.open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            }
            switch opened {
            case .success(let fd): close(fd)
            case .failure(let failure):
                remove()
                throw SignetError.posix(failure, "cannot create a temporary file beside", path: output)
            }
            paths.append(path)
        }
        let jobs = (0..<count).map { Job(path: paths[$0], ledger: ledger, files: shares[$0].map { ($0, methods[$0]) }) }
        let results = parallelMap(jobs) { job in Result { try job.run() } }
        do {
            for result in results { try result.get() }
            placement = Array(repeating: nil, count: inputs.count)
            for (worker, share) in shares.enumerated() {
                // Signet wrote these archives itself a moment ago: read their directories
                // directly rather than keep a libzip reader (and a zip_source_zip) per entry.
                let archive = try InputFile.open(paths[worker], what: "temporary archive")
                let records = try CentralDirectory.records(of: archive, archive: paths[worker])
                guard records.count == share.count else {
                    throw SignetError(.io, "the temporary archive '\(paths[worker])' holds \(records.count) entries, not \(share.count)", path: paths[worker])
                }
                for (record, index) in zip(records, share) {
                    guard records.name(of: record).elementsEqual(String(index).utf8), record.method == CentralDirectory.deflateMethod, record.size == inputs[index].size else {
                        throw SignetError(.io, "the temporary archive '\(paths[worker])' does not hold what was written to it", path: paths[worker])
                    }
                    placement[index] = Placement(worker: UInt16(worker), crc: record.crc, localHeaderOffset: record.localHeaderOffset,
                                                 compressedSize: record.compressedSize)
                }
                archives.append(archive)
            }
        } catch {
            remove()
            throw error
        }
    }

    /// The deflate stream of input `index`, if it was compressed here.
    func source(for index: Int) -> ZipEntrySource? {
        guard index < placement.count, let place = placement[index] else { return nil }
        return CopiedDeflateSource(file: archives[Int(place.worker)], localHeaderOffset: place.localHeaderOffset,
                                   compressedSize: place.compressedSize, crc: place.crc, size: ledger.inputs[index].size)
    }

    /// Deletes the temporary archives (the open descriptors stay readable until released).
    func remove() {
        for path in paths { unlink(path) }
        for token in tokens { TemporaryFiles.unregister(token) }
        tokens.removeAll()
    }

    /// One worker: its files, compressed into one temporary archive.
    private final class Job: @unchecked Sendable {
        // Each input index belongs to exactly one job; its source is made and read on that job's thread.
        let path: String
        let ledger: PackLedger
        let files: [(index: Int, method: ZipCompression)]

        init(path: String, ledger: PackLedger, files: [(index: Int, method: ZipCompression)]) {
            self.path = path
            self.ledger = ledger
            self.files = files
        }

        func run() throws {
            // Through a descriptor of the file made (and registered) for it: libzip writing to a
            // path would make a temporary file of its own that an interruption cannot know.
            let fd: Int32
            do { fd = try Paths.open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC) } catch {
                throw SignetError.posix(error, "cannot open the temporary archive", path: path)
            }
            let writer = try ZipWriter(writingTo: ArchiveOutput(descriptor: fd, path: path))
            for (index, method) in files {
                try writer.add(String(index), source: ResourceSource(ledger, index: index), compression: method, permissions: 0o644)
            }
            try writer.close()
        }
    }
}

enum System {
    /// Cores this process may use.
    static var activeProcessorCount: Int { max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))) }
}

/// Which resources are deflated.
enum CompressionPolicy {
    /// Types that are already compressed: deflating them costs time and gains nothing.
    static let compressedExtensions: Set<String> = [
        "png", "jpg", "jpeg", "gif", "webp", "avif", "heic", "zip", "jar", "apk", "gz", "tgz", "bz2", "xz", "txz",
        "zst", "lz4", "7z", "rar", "mp3", "m4a", "aac", "ogg", "opus", "flac", "mp4", "m4v", "mov", "mkv", "webm",
        "woff", "woff2", "br", "deb", "rpm", "squashfs",
    ]

    /// Bytes looked at to judge compressibility.
    static let sampleSize = 64 * 1024
    /// Above this many bits of entropy per byte, deflate cannot shrink the data in practice.
    static let incompressibleEntropy = 7.95

    static func choose(for input: PackInput, policy: PackOptions.Compression) throws -> ZipCompression {
        guard case .automatic(let level) = policy else { return .store }
        if let dot = input.packagePath.lastIndex(of: "."),
           compressedExtensions.contains(input.packagePath[input.packagePath.index(after: dot)...].lowercased()) {
            return .store
        }
        // libzip 1.7 keeps deflated data even when it is larger than the input, so judge first:
        // the byte entropy of a sample tells random or already-compressed data from the rest.
        if input.size >= 4096, try entropy(ofPrefixOf: input.diskPath) > incompressibleEntropy {
            return .store
        }
        // A small file is deflated here first, the way libzip would: deflate's own framing
        // makes tiny files larger (a 30-byte text became 32 bytes), and those are stored.
        if input.size < 4096 {
            let bytes = try InputFile.open(input.diskPath, what: "resource").readAll(limit: 4096, what: "resource")
            let deflated = bytes.withUnsafeBufferPointer { signet_raw_deflate_size($0.baseAddress, $0.count, Int32(level)) }
            if deflated < 0 || deflated >= bytes.count { return .store }
        }
        return .deflate(level: UInt32(level))
    }

    /// Shannon entropy (bits per byte) of the first `sampleSize` bytes.
    static func entropy(ofPrefixOf path: String) throws -> Double {
        let file = try InputFile.open(path, what: "resource")
        var counts = [Int](repeating: 0, count: 256)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: sampleSize, alignment: 16)
        defer { buffer.deallocate() }
        let total = try file.read(fullyAt: 0, into: buffer)
        guard total > 0 else { return 0 }
        for byte in UnsafeRawBufferPointer(rebasing: buffer[0..<total]) { counts[Int(byte)] += 1 }
        var entropy = 0.0
        for count in counts where count > 0 {
            let p = Double(count) / Double(total)
            entropy -= p * log2(p)
        }
        return entropy
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
