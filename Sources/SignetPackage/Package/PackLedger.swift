import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto
import SignetManifest
import SignetArchive

/// What one pack keeps per resource while libzip writes the package, kept flat so that memory
/// grows with the file count by little more than the manifest line each file gets.
///
/// Per resource: its ``PackInput`` (paths, size, mode), the digests its single read produced
/// (SHA-256 for the manifest, and the signing digest when that is another algorithm), and a
/// "read to the end" flag. Signatures are not kept: they are made when libzip asks for the
/// first signature entry of a batch, a batch at a time on every core, and dropped once libzip
/// has copied them into the archive.
final class PackLedger: @unchecked Sendable {
    // Each resource's digest slot is written by the one source reading that resource (on a
    // deflate worker or inside the package's zip_close), and read only after that read ended:
    // no two threads touch one slot at the same time. The signature batch is used by the
    // thread running the package's zip_close only.
    let inputs: [PackInput]
    let signer: Signer
    /// SHA-256 first; the signing digest second when it is not SHA-256.
    let algorithms: [DigestAlgorithm]
    /// Bytes of every signature the key makes (RSA: the modulus length).
    let signatureSize: Int
    private let stride: Int
    private let digests: UnsafeMutableBufferPointer<UInt8>
    private let complete: UnsafeMutableBufferPointer<Bool>
    private var batchStart = 0
    private var batch: [[UInt8]] = []
    /// The installed tree's signature record (FORMAT.md §3) hashed as the signature entries are
    /// written, in manifest order, for `.signet/signatures.sig`.
    private var recordHasher: Digest.Hasher?
    private var recordHashed = 0

    /// Signatures made per batch: enough to keep every core busy, few enough to stay small
    /// (128 RSA-4096 signatures are 64 KiB).
    static let batchSize = 128

    /// The resources packed as structured, by index (read only after init).
    let structured: [Int: StructuredResources.Checked]

    /// Counts what was read, for a progress handler.
    let progress: ProgressCounter?
    /// Which resources are chunked as they are read (by index; empty: none).
    let chunked: [Bool]
    /// The chunk indexes made, by resource index (each written by the one source reading it).
    private let chunkIndexes = Mutex<[Int: ChunkIndex]>([:])

    /// Whether each resource's fs-verity digest is computed as it is read (`pack --verity`).
    let verity: Bool
    /// The fs-verity digests made, by resource index.
    private let verityDigests = Mutex<[Int: [UInt8]]>([:])

    /// Keeps resource `index`'s fs-verity digest.
    func record(verity digest: [UInt8], at index: Int) {
        verityDigests.withLock { $0[index] = digest }
    }

    init(
        inputs: [PackInput], signer: Signer, structured: [Int: StructuredResources.Checked] = [:], progress: ProgressHandler? = nil,
        chunked: [Bool] = [], verity: Bool = false
    ) {
        self.inputs = inputs
        self.chunked = chunked
        self.verity = verity
        self.structured = structured
        self.progress = ProgressCounter.make(progress, items: inputs.count, bytes: inputs.reduce(0) { $0 &+ $1.size })
        self.signer = signer
        algorithms = signer.algorithm.digest == .sha256 ? [.sha256] : [.sha256, signer.algorithm.digest]
        signatureSize = signer.key.key.signatureSize
        stride = algorithms.reduce(0) { $0 + $1.size }
        digests = .allocate(capacity: max(1, inputs.count * stride))
        digests.initialize(repeating: 0)
        complete = .allocate(capacity: max(1, inputs.count))
        complete.initialize(repeating: false)
    }

    deinit {
        digests.deallocate()
        complete.deallocate()
    }

    /// Stores the digests of resource `index`, in the order of ``algorithms``.
    func record(_ values: [Digest], at index: Int) {
        var offset = index * stride
        for value in values {
            for (position, byte) in value.bytes.enumerated() { digests[offset + position] = byte }
            offset += value.bytes.count
        }
        complete[index] = true
    }

    /// Keeps resource `index`'s chunk index.
    func record(_ chunks: ChunkIndex, at index: Int) {
        chunkIndexes.withLock { $0[index] = chunks }
    }

    /// The deflate indexes of the resources deflated in segments, by resource index.
    private let deflateIndexes = Mutex<[Int: DeflateIndex]>([:])

    /// Keeps resource `index`'s deflate index (``SegmentedDeflate``).
    func record(_ deflate: DeflateIndex, at index: Int) {
        deflateIndexes.withLock { $0[index] = deflate }
    }

    /// The SHA-256 of resource `index`, as lowercase hex for the manifest.
    func sha256Hex(at index: Int) throws -> String {
        try checkRead(index)
        return Array(digests[(index * stride)..<(index * stride + 32)]).hexString
    }

    /// The digest the signature of resource `index` covers.
    func signingDigest(at index: Int) throws -> Digest {
        try checkRead(index)
        let algorithm = algorithms[algorithms.count - 1]
        let end = index * stride + stride
        return Digest(algorithm: algorithm, bytes: Array(digests[(end - algorithm.size)..<end]))!
    }

    /// The signature of resource `index`. Signatures are asked for in index order (the
    /// `.signet/sigs/` entries follow the resources), so the batch from `index` on is made now,
    /// on every core, and the previous batch is let go.
    func signature(at index: Int) throws -> [UInt8] {
        let signature = try makeSignature(at: index)
        if index == recordHashed {
            if recordHasher == nil {
                recordHasher = try Digest.Hasher(signer.algorithm.digest)
                SignatureRecord.header(length: signatureSize).withUnsafeBytes { recordHasher!.update($0) }
            }
            signature.withUnsafeBytes { recordHasher!.update($0) }
            recordHashed += 1
        }
        return signature
    }

    /// The signature over the signature record an install of this package writes (its header,
    /// then every resource's signature in manifest order): `.signet/signatures.sig`, which lets
    /// a tree check believe the record without verifying each signature (FORMAT.md §2, §3).
    /// Asked for once every signature entry has been written.
    func recordSignature() throws -> [UInt8] {
        guard recordHashed == inputs.count else {
            throw SignetError(.io, "the signature record was asked for before every signature was written (\(recordHashed) of \(inputs.count))")
        }
        let hasher =
            try recordHasher
            ?? {
                let made = try Digest.Hasher(signer.algorithm.digest)
                SignatureRecord.header(length: signatureSize).withUnsafeBytes { made.update($0) }
                return made
            }()
        return try signer.sign(digest: try hasher.finalize()).bytes
    }

    private func makeSignature(at index: Int) throws -> [UInt8] {
        if index >= batchStart, index < batchStart + batch.count { return batch[index - batchStart] }
        batch = []
        let indices = Array(index..<min(inputs.count, index + Self.batchSize))
        let results = parallelMap(indices) { index in
            Result { try self.signer.sign(digest: self.signingDigest(at: index)).bytes }
        }
        batch = try results.map { try $0.get() }
        batchStart = index
        return batch[0]
    }

    /// The manifest's file list, once every resource has been read.
    func manifestFiles() throws -> [Manifest.File] {
        try inputs.indices.map { index in
            let input = inputs[index]
            let sha256 = try sha256Hex(at: index)
            var format: StructuredFormat? = nil
            if let checked = structured[index] {
                // What was packed must be what parsed.
                guard checked.sha256 == sha256 else {
                    throw SignetError(.io, "'\(input.diskPath)' changed while it was being packed; pack again when nothing writes to it", path: input.diskPath)
                }
                format = checked.format
            }
            var file = Manifest.File(path: input.packagePath, size: input.size, sha256: sha256, mode: input.mode, structured: format)
            file.chunks = chunkIndexes.withLock { $0[index] }
            file.deflate = deflateIndexes.withLock { $0[index] }
            if verity {
                guard let digest = verityDigests.withLock({ $0[index] }) else {
                    throw SignetError(.io, "resource '\(input.diskPath)' got no fs-verity digest as it was read", path: input.diskPath)
                }
                file.verity = Manifest.ContentHash(lowercaseHex: digest.hexString)
            }
            if index < chunked.count, chunked[index], file.chunks == nil {
                throw SignetError(.io, "resource '\(input.diskPath)' was not chunked as it was read", path: input.diskPath)
            }
            return file
        }
    }

    private func checkRead(_ index: Int) throws {
        guard complete[index] else {
            let path = inputs[index].diskPath
            throw SignetError(.io, "resource '\(path)' was not read to the end", path: path)
        }
    }
}

/// Resource `index` of a ledger, read once as libzip stores or deflates it; the digests go to
/// the ledger when the read reaches the end. The open file and digest contexts exist only
/// while libzip reads this entry.
final class ResourceSource: ZipEntrySource {
    private let ledger: PackLedger
    private let index: Int
    private var reading: Reading?

    private final class Reading {
        let file: InputFile
        let hashers: [Digest.Hasher]
        /// Chunks on the second core (``PipelinedHasher``) while this thread hashes the file.
        let chunking: (pipeline: PipelinedHasher, chunker: ContentChunker)?
        /// The fs-verity digest (`pack --verity`), on this thread.
        let verity: VerityDigest?
        var count: UInt64 = 0
        /// Size, modification and change times when it was opened: the same at the end, or
        /// the file was rewritten in place while it was read (a torn mix of two versions).
        let stamp: [Int]

        init(file: InputFile, hashers: [Digest.Hasher], chunker: ContentChunker?, verity: Bool) throws {
            self.file = file
            self.hashers = hashers
            self.verity = verity ? try VerityDigest() : nil
            chunking = try chunker.map { (try PipelinedHasher([], chunker: $0), $0) }
            stamp = Self.stamp(try file.descriptor.status())
        }

        static func stamp(_ info: stat) -> [Int] {
            [Int(info.st_size), info.st_mtim.tv_sec, info.st_mtim.tv_nsec, info.st_ctim.tv_sec, info.st_ctim.tv_nsec]
        }
    }

    init(_ ledger: PackLedger, index: Int) {
        self.ledger = ledger
        self.index = index
    }

    private var input: PackInput { ledger.inputs[index] }

    func size() throws -> UInt64 { input.size }

    func open() throws {
        let input = input
        let file = try InputFile.open(input.diskPath, what: "resource", followSymlinks: true)
        guard UInt64(file.size) == input.size else { throw changed() }
        let chunked = index < ledger.chunked.count && ledger.chunked[index]
        reading = try Reading(
            file: file, hashers: try ledger.algorithms.map { try Digest.Hasher($0) }, chunker: chunked ? try ContentChunker() : nil, verity: ledger.verity)
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard let reading else { return 0 }
        let n = try reading.file.readChunk(into: buffer)
        reading.count += UInt64(n)
        guard reading.count <= input.size else { throw changed() }
        if n == 0 {
            guard reading.count == input.size, Reading.stamp(try reading.file.descriptor.status()) == reading.stamp else { throw changed() }
            if let chunking = reading.chunking {
                _ = try chunking.pipeline.finalize()
                ledger.record(try chunking.chunker.finish(), at: index)
            }
            if let verity = reading.verity { ledger.record(verity: try verity.finalize(), at: index) }
            ledger.record(try reading.hashers.map { try $0.finalize() }, at: index)
            ledger.progress?.add(items: 1)
            self.reading = nil // close the file and free the digest contexts now
            return 0
        }
        ledger.progress?.add(bytes: n)
        let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<n])
        for hasher in reading.hashers { hasher.update(chunk) }
        try reading.verity?.update(chunk)
        reading.chunking?.pipeline.update(chunk)
        return n
    }

    func close() throws {
        reading = nil
    }

    private func changed() -> SignetError {
        let input = input
        return SignetError(
            .io,
            "resource '\(input.diskPath)' changed while it was being packed (its size, modification or change time is not what it was when it was opened, \(input.size) bytes); pack again once nothing writes to it",
            path: input.diskPath)
    }
}

/// The `.signet/sigs/` entry of resource `index`: its bytes exist from libzip's open to its close.
final class SignatureEntrySource: ZipEntrySource {
    private let ledger: PackLedger
    private let index: Int
    private var bytes: [UInt8]?
    private var offset = 0

    init(_ ledger: PackLedger, index: Int) {
        self.ledger = ledger
        self.index = index
    }

    // libzip asks for the size before opening and again after closing: it is the key's size.
    func size() throws -> UInt64 { UInt64(ledger.signatureSize) }

    func open() throws {
        let signature = try ledger.signature(at: index)
        guard signature.count == ledger.signatureSize else {
            throw SignetError(.crypto, "the key made a \(signature.count)-byte signature, not \(ledger.signatureSize) bytes")
        }
        bytes = signature
        offset = 0
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard let bytes else { return 0 }
        let n = bytes.copyBytes(from: offset, into: buffer)
        offset += n
        return n
    }

    func close() throws {
        bytes = nil
    }
}
