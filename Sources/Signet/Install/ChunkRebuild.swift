#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage

/// How a changed large resource is rebuilt from the installed copy instead of fetched whole
/// (FORMAT.md §5, "Chunked resources"; issue 40): the new file's chunk index (signed, in the new
/// manifest) and the installed file's (from DIR's own verified manifest) say which chunks the
/// device already holds and where; only the others are fetched, by range, from the stored
/// entry's bytes.
struct ChunkPlan {
    /// The new file's chunks.
    let chunks: ChunkIndex
    /// For each new chunk, its offset in the installed file (nil: fetched).
    let sources: [UInt64?]
    /// Where the entry's bytes are in the package (checked against its local header).
    let data: Range<UInt64>

    /// A chunk's SHA-256, as the lookup key of the installed file's chunks (its first 16 bytes;
    /// every chunk read is hashed whole before it is used).
    struct Key: Hashable {
        let high: UInt64, low: UInt64
        init(_ hash: ArraySlice<UInt8>) {
            high = hash.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
            low = hash.dropFirst(8).prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
        }
    }

    /// The plan for `chunks` against an installed file of `installed` chunks; nil when the
    /// installed file shares none of them (then the entry is fetched whole, as before).
    init?(chunks: ChunkIndex, installed: ChunkIndex, data: Range<UInt64>) {
        var held: [Key: UInt64] = [:]
        held.reserveCapacity(installed.count)
        for (index, span) in installed.spans.enumerated() { held[Key(installed.hash(index))] = held[Key(installed.hash(index))] ?? span.offset }
        let sources = (0..<chunks.count).map { held[Key(chunks.hash($0))] }
        guard sources.contains(where: { $0 != nil }) else { return nil }
        self.chunks = chunks
        self.sources = sources
        self.data = data
    }

    /// The package's byte ranges of the chunks to fetch (neighbours merged).
    var fetchRanges: [Range<Int64>] {
        var ranges: [Range<Int64>] = []
        for (index, span) in chunks.spans.enumerated() where sources[index] == nil {
            let start = Int64(data.lowerBound + span.offset), end = start + Int64(span.length)
            if let last = ranges.last, last.upperBound == start { ranges[ranges.count - 1] = last.lowerBound..<end } else { ranges.append(start..<end) }
        }
        return ranges
    }

    /// Bytes to fetch.
    var fetchBytes: UInt64 {
        chunks.spans.enumerated().reduce(0) { $0 + (sources[$1.offset] == nil ? $1.element.length : 0) }
    }
}

/// What rebuilding one file did, for the report.
struct ChunkCounts {
    var reused = 0, fetched = 0
    var bytesReused: UInt64 = 0, bytesFetched: UInt64 = 0
}

extension Installer.Job {
    /// Stages `file` from `plan`: each chunk the installed file (below `root`) holds is read
    /// from it and hashed; one that does not hash to the new index (the installed file was
    /// modified), and every other chunk, is read from the package through `input` (planned) and
    /// hashed too — a chunk from the package that does not match the signed index is the
    /// package's fault, and refused. The file is written once, in order, and its whole SHA-256
    /// and signature are checked before it counts as staged. Nil, with nothing staged, when the
    /// installed file cannot be opened or the entry is not where the plan says.
    func stageRebuilt(_ file: Manifest.File, plan: ChunkPlan, from root: FileDescriptor, input: any ArchiveInput, into staging: Staging,
                      checked: PackageReader.Checked, counts: inout ChunkCounts,
                      later: ((_ signature: [UInt8], _ digest: Digest) -> Void)?) throws -> Staged? {
        guard let entry = layout.resource(file.path), entry.size == file.size, try reader.storedData(of: entry) == plan.data,
              let opened = try? Paths.open(file.path, beneath: root),
              let installed = try? InputFile.adopt(opened, path: destination + "/" + file.path, what: "installed file") else { return nil }
        var kept = false
        defer { if !kept { staging.removeFile(file.path) } }
        let staged = try staging.createFile(file.path, mode: mode_t(file.mode.permissions))
        let writer = Installer.StagedWriter(fd: staged.descriptor, path: file.path, destination: destination)
        let hashers = try (checked.algorithm.digest == .sha256 ? [DigestAlgorithm.sha256] : [.sha256, checked.algorithm.digest]).map { try Digest.Hasher($0) }
        let chunkHasher = try Digest.Hasher(.sha256)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: ContentChunker.maximum, alignment: 64)
        defer { buffer.deallocate() }
        /// Reads `length` bytes at `offset` of `source` into the buffer; whether they are the chunk.
        func read(_ index: Int, length: Int, at offset: UInt64, from source: (UInt64, UnsafeMutableRawBufferPointer) throws -> Int) throws -> Bool {
            let chunk = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<length])
            guard try source(offset, chunk) == length else { return false }
            try chunkHasher.restart()
            chunkHasher.update(UnsafeRawBufferPointer(chunk))
            return try chunkHasher.finalize().bytes.elementsEqual(plan.chunks.hash(index))
        }
        for (index, span) in plan.chunks.spans.enumerated() {
            let length = Int(span.length)
            var fromInstalled = false
            if let old = plan.sources[index] {
                fromInstalled = (try? read(index, length: length, at: old) { try installed.read(fullyAt: Int64($0), into: $1) }) ?? false
            }
            if fromInstalled {
                counts.reused += 1
                counts.bytesReused += span.length
            } else {
                let at = plan.data.lowerBound + span.offset
                guard try read(index, length: length, at: at, from: { try input.read(fullyAt: Int64($0), into: $1) }) else {
                    throw Installer.error(for: .modified, "'\(file.path)' does not match the chunk index in the manifest (chunk \(index) at \(span.offset))",
                                          package: package, entry: file.path)
                }
                counts.fetched += 1
                counts.bytesFetched += span.length
            }
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<length])
            hashers.forEach { $0.update(chunk) }
            try writer.write(chunk)
        }
        let digests = try hashers.map { try $0.finalize() }
        guard file.content.matches(digests[0]) else {
            throw Installer.error(for: .modified, "'\(file.path)' rebuilt from its chunks does not match the SHA-256 in the manifest", package: package, entry: file.path)
        }
        let digest = digests[digests.count - 1]
        let signature = try reusedSignature(file, own: nil, digest: digest, checked: checked, later: later)
        let finished = try finishStaged(file, fd: staged.descriptor, writer: writer, copy: nil, signature: signature, sha256: file.sha256,
                                        signer: checked.key, checked: checked, into: staging)
        kept = true
        return finished
    }
}
