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
import SignetNetwork
import SignetPackage

/// How a changed large resource is rebuilt from the installed copy instead of fetched whole
/// (FORMAT.md §5, "Chunked resources"): the new file's chunk index (signed, in the new
/// manifest) and the installed file's (from DIR's own verified manifest) say which chunks the
/// device already holds and where; only the others are fetched, by range, from the stored
/// entry's bytes.
struct ChunkPlan {
    /// The new file's chunks.
    let chunks: ChunkIndex
    /// Where the entry's bytes are in the package (checked against its local header): the
    /// file's bytes for a stored entry, the deflate stream for a deflated one.
    let data: Range<UInt64>
    /// For a deflated entry: each segment's start in the deflate stream, and its end
    /// (``DeflateIndex/offsets``); fetched bytes are then whole segments, inflated.
    let segments: [UInt64]?
    /// Per new chunk, where its bytes come from, in order (none for the chunks resumed).
    let pieces: [[Piece]]
    /// The leading chunks an interrupted run left in the staged file, each checked against its
    /// SHA-256 in the index: kept where they are, neither read nor fetched again.
    let resumed: Int

    /// Bytes of the new file at `offset`: from the installed file at `installed`, or fetched.
    struct Piece {
        let offset: UInt64
        let length: UInt64
        /// Offset in the installed file; nil: fetched from the package.
        let installed: UInt64?
    }

    /// A chunk's SHA-256, as the lookup key of the installed file's chunks (its first 16 bytes;
    /// every chunk read is hashed whole before it is used).
    struct Key: Hashable {
        let high: UInt64, low: UInt64
        init(_ hash: ArraySlice<UInt8>) {
            high = hash.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
            low = hash.dropFirst(8).prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
        }
    }

    /// The plan for a file of `chunks` (and its blocks) against an installed copy of
    /// `installedSize` bytes and `installed` chunks and blocks: a chunk the installed copy holds
    /// anywhere is read from there; of any other chunk, each 4 KiB block whose hash equals the
    /// installed copy's block at the same offset (a change in place) is read from there, and
    /// the rest is fetched. Nil when nothing would come from the installed copy.
    init?(chunks: ChunkIndex, installed: ChunkIndex, installedSize: UInt64, data: Range<UInt64>, segments: [UInt64]? = nil) {
        var held: [Key: UInt64] = [:]
        held.reserveCapacity(installed.count)
        for (index, span) in installed.spans.enumerated() where held[Key(installed.hash(index))] == nil {
            held[Key(installed.hash(index))] = span.offset
        }
        let size = chunks.spans.last.map { $0.offset + $0.length } ?? 0, block = UInt64(ChunkIndex.blockSize)
        // The installed copy's whole blocks by hash, for content shifted by a multiple of 4 KiB
        // (a block not at the same offset); 4-byte keys, so a match is only a candidate, which
        // the chunk's full SHA-256 confirms.
        var blocksHeld: [UInt32: UInt64] = [:]
        let wholeBlocks = Int(installedSize / block)
        blocksHeld.reserveCapacity(min(wholeBlocks, installed.blockCount))
        for number in 0..<min(wholeBlocks, installed.blockCount) {
            let key = installed.blockKey(number)
            if blocksHeld[key] == nil { blocksHeld[key] = UInt64(number) * block }
        }
        var reused = false
        var pieces: [[Piece]] = []
        pieces.reserveCapacity(chunks.count)
        for (index, span) in chunks.spans.enumerated() {
            if let old = held[Key(chunks.hash(index))] {
                pieces.append([Piece(offset: span.offset, length: span.length, installed: old)])
                reused = true
                continue
            }
            var list: [Piece] = []
            var position = span.offset
            let end = span.offset + span.length
            while position < end {
                let number = position / block
                let blockEnd = min((number + 1) * block, size)
                let partEnd = min(end, blockEnd)
                let same =
                    Int(number) < installed.blockCount && Int(number) < chunks.blockCount
                    && min((number + 1) * block, installedSize) == blockEnd && chunks.block(Int(number)) == installed.block(Int(number))
                var source: UInt64? = same ? position : nil
                if source == nil, blockEnd - number * block == block, Int(number) < chunks.blockCount,
                    let shifted = blocksHeld[chunks.blockKey(Int(number))]
                {
                    source = shifted + (position - number * block)
                }
                if let last = list.last, last.offset + last.length == position,
                    last.installed.map({ old in source == old + (position - last.offset) }) ?? (source == nil)
                {
                    list[list.count - 1] = Piece(offset: last.offset, length: last.length + partEnd - position, installed: last.installed)
                } else {
                    list.append(Piece(offset: position, length: partEnd - position, installed: source))
                }
                reused = reused || source != nil
                position = partEnd
            }
            pieces.append(list)
        }
        guard reused else { return nil }
        self.chunks = chunks
        self.data = data
        self.segments = segments
        self.pieces = pieces
        self.resumed = 0
    }

    /// The blocks (numbers, runs merged) of the chunks of `chunks` from `first` on that
    /// `installed` does not hold: those whose hints a plan compares with the installed copy's,
    /// and so the only ones a device reads from a package's chunk-index entry.
    static func blocksToCompare(_ chunks: ChunkIndex, installed: ChunkIndex, from first: Int) -> [Range<Int>] {
        var held = Set<Key>()
        held.reserveCapacity(installed.count)
        for index in 0..<installed.count { held.insert(Key(installed.hash(index))) }
        let block = UInt64(ChunkIndex.blockSize)
        var runs: [Range<Int>] = []
        for (index, span) in chunks.spans.enumerated() where index >= first && !held.contains(Key(chunks.hash(index))) {
            let run = Int(span.offset / block)..<Int((span.offset + span.length + block - 1) / block)
            if let last = runs.last, last.upperBound >= run.lowerBound {
                runs[runs.count - 1] = last.lowerBound..<max(last.upperBound, run.upperBound)
            } else {
                runs.append(run)
            }
        }
        return runs
    }

    /// The plan for a file whose first `resumed` chunks an interrupted run staged: the rest
    /// as `base` plans them (from the installed copy where it holds them), else fetched.
    init(resuming resumed: Int, chunks: ChunkIndex, data: Range<UInt64>, segments: [UInt64]?, base: ChunkPlan?) {
        self.chunks = chunks
        self.data = data
        self.segments = segments
        self.resumed = resumed
        pieces = chunks.spans.enumerated().map { index, span in
            index < resumed ? [] : base?.pieces[index] ?? [Piece(offset: span.offset, length: span.length, installed: nil)]
        }
    }

    /// The number of leading chunks of `fd` (a file an interrupted run staged) that hash to
    /// `chunks`: read in order, up to the first that is short or differs.
    static func verifiedChunks(of fd: FileDescriptor, chunks: ChunkIndex) -> Int {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: ContentChunker.maximum, alignment: 64)
        defer { buffer.deallocate() }
        guard let hasher = try? Digest.Hasher(.sha256) else { return 0 }
        var count = 0
        for (index, span) in chunks.spans.enumerated() {
            let into = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(span.length)])
            guard (try? fd.read(fullyAt: Int64(span.offset), into: into)) == into.count, (try? hasher.restart()) != nil else { break }
            hasher.update(UnsafeRawBufferPointer(into))
            guard let digest = try? hasher.finalize(), chunks.matches(index, digest) else { break }
            count = index + 1
        }
        return count
    }

    /// The package's byte ranges of the pieces to fetch (neighbours merged): for a deflated
    /// entry, the compressed bytes of every segment a fetched piece touches.
    var fetchRanges: [Range<Int64>] {
        var ranges: [Range<Int64>] = []
        for piece in pieces.joined() where piece.installed == nil {
            let (start, end) = packageRange(of: piece.offset..<(piece.offset + piece.length))
            if let last = ranges.last, last.upperBound >= start {
                ranges[ranges.count - 1] = last.lowerBound..<max(end, last.upperBound)
            } else {
                ranges.append(start..<end)
            }
        }
        return ranges
    }

    /// Where the file bytes `range` are read from in the package.
    func packageRange(of range: Range<UInt64>) -> (Int64, Int64) {
        guard let segments else { return (Int64(data.lowerBound + range.lowerBound), Int64(data.lowerBound + range.upperBound)) }
        let size = UInt64(DeflateIndex.segmentSize)
        let first = Int(range.lowerBound / size), last = Int((range.upperBound + size - 1) / size)
        return (Int64(data.lowerBound + segments[first]), Int64(data.lowerBound + segments[min(last, segments.count - 1)]))
    }
}

extension Installer.Job {
    /// Hashes the first `length` bytes of a staged file an interrupted run left into `hashers`
    /// (the file is ours, in our staging tree, but read once more so that what is hashed is
    /// what is installed). False when it is shorter.
    static func hashStaged(_ fd: FileDescriptor, upTo length: UInt64, into hashers: ContentHashers, buffer: UnsafeMutableRawBufferPointer) throws -> Bool {
        var offset: UInt64 = 0
        while offset < length {
            let into = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(UInt64(buffer.count), length - offset))])
            guard try fd.read(fullyAt: Int64(offset), into: into) == into.count else { return false }
            try hashers.update(UnsafeRawBufferPointer(into))
            offset += UInt64(into.count)
        }
        return true
    }
}

/// What rebuilding one file did, for the report.
struct ChunkCounts {
    var reused = 0, fetched = 0, resumed = 0
    var bytesReused: UInt64 = 0, bytesFetched: UInt64 = 0, bytesResumed: UInt64 = 0
}

extension Installer.Job {
    /// Stages `file` from `plan`: each chunk the installed file (below `root`) holds is read
    /// from it and hashed; one that does not hash to the new index (the installed file was
    /// modified), and every other chunk, is read from the package through `input` (planned) and
    /// hashed too — a chunk from the package that does not match the signed index is the
    /// package's fault, and refused. The file is written once, in order, and its whole SHA-256
    /// and signature are checked before it counts as staged. Nil, with nothing staged, when the
    /// installed file cannot be opened or the entry is not the plan's.
    ///
    /// With `plan.resumed`, the staged file an interrupted run left is continued: its verified
    /// leading chunks are hashed where they are and the rest is written after them. A transfer
    /// that fails (`network`, `package-changed`) leaves the file staged for the next run, which
    /// checks every chunk of it again before keeping any.
    func stageRebuilt(
        _ file: Manifest.File, plan: ChunkPlan, from root: FileDescriptor?, input: any ArchiveInput, into staging: Staging,
        checked: PackageReader.Checked, counts: inout ChunkCounts,
        later: ((_ signature: [UInt8], _ digest: Digest) -> Void)?
    ) throws -> Staged? {
        var kept = false, keptForNextRun = false
        defer { if !kept && !keptForNextRun { staging.removeFile(file.path) } }
        // `plan.data` came from the entry's local header, checked when the plan was made.
        let needsInstalled = plan.pieces.joined().contains { $0.installed != nil }
        guard let entry = layout.resource(file.path), entry.size == file.size,
            UInt64(plan.data.count) == (plan.segments == nil ? entry.size : entry.compressedSize)
        else { return nil }
        let segmentReader = plan.segments.flatMap { DeflatedSegments(input: input, data: plan.data, offsets: $0, fileSize: file.size) }
        if plan.segments != nil && segmentReader == nil { return nil }
        var installed: InputFile? = nil
        if needsInstalled {
            guard let root, let opened = try? Paths.open(file.path, beneath: root),
                let source = try? InputFile.adopt(opened, path: destination + "/" + file.path, what: "installed file")
            else { return nil }
            installed = source
        }
        let resumeAt = plan.resumed < plan.chunks.count ? plan.chunks.spans[plan.resumed].offset : file.size
        let staged = plan.resumed > 0 ? try staging.openFile(file.path) : try staging.createFile(file.path, mode: mode_t(file.mode.permissions))
        let hashers = try ContentHashers(for: file, algorithm: checked.algorithm)
        let chunkHasher = try Digest.Hasher(.sha256)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: ContentChunker.maximum, alignment: 64)
        defer { buffer.deallocate() }
        if plan.resumed > 0 {
            // The chunks checked when the plan was made, hashed again into the whole file's
            // digests as they are read (the file is ours, in our staging tree, but read once
            // more so that what is hashed is what is installed); what follows them is cut.
            guard try Self.hashStaged(staged.descriptor, upTo: resumeAt, into: hashers, buffer: buffer),
                ftruncate(staged.descriptor.rawValue, off_t(resumeAt)) == 0
            else { return nil }
            counts.resumed += plan.resumed
            counts.bytesResumed += resumeAt
        }
        let writer = Installer.StagedWriter(fd: staged.descriptor, path: file.path, destination: destination, at: Int64(resumeAt))
        var scanned = false
        /// At the first chunk the installed copy does not hold right (damaged in place): every
        /// later chunk made only of installed pieces is read and hashed now, and those that do
        /// not match are planned as ranges of the package, so that they arrive several to a
        /// request (FORMAT §5's bound) instead of one request each.
        func planDamaged(from first: Int) throws {
            guard !scanned, let ranged = input as? any PlannedInput else { return }
            scanned = true
            var damaged: [Range<Int64>] = []
            for later in first..<plan.chunks.spans.count where !plan.pieces[later].isEmpty && plan.pieces[later].allSatisfy({ $0.installed != nil }) {
                let span = plan.chunks.spans[later]
                var complete = true
                for piece in plan.pieces[later] {
                    let into = UnsafeMutableRawBufferPointer(rebasing: buffer[Int(piece.offset - span.offset)..<Int(piece.offset - span.offset + piece.length)])
                    complete = complete && (try? installed?.read(fullyAt: Int64(piece.installed!), into: into)) == into.count
                }
                try chunkHasher.restart()
                chunkHasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<Int(span.length)]))
                let matching = plan.chunks.matches(later, try chunkHasher.finalize())
                if !complete || !matching {
                    let (start, end) = plan.packageRange(of: span.offset..<(span.offset + span.length))
                    damaged.append(start..<end)
                }
            }
            ranged.plan(damaged)
        }
        do {
            /// The file's bytes at `offset` from the package: the entry's bytes, or inflated
            /// segments whose dictionary is the file before them (the staged file below the chunk
            /// being assembled at `chunkStart`, and `buffer`'s bytes of that chunk after it).
            func fetch(_ offset: UInt64, into: UnsafeMutableRawBufferPointer, chunkStart: UInt64) throws -> Bool {
                guard let segmentReader else { return try input.read(fullyAt: Int64(plan.data.lowerBound + offset), into: into) == into.count }
                return try segmentReader.read(at: offset, into: into) { start, dictionary in
                    var done = 0
                    if start < chunkStart {
                        done = Int(min(UInt64(dictionary.count), chunkStart - start))
                        guard try staged.descriptor.read(fullyAt: Int64(start), into: UnsafeMutableRawBufferPointer(rebasing: dictionary[0..<done])) == done
                        else { return false }
                    }
                    if done < dictionary.count {
                        let from = Int(start + UInt64(done) - chunkStart), count = dictionary.count - done
                        guard from + count <= buffer.count else { return false }
                        UnsafeMutableRawBufferPointer(rebasing: dictionary[done...]).copyMemory(
                            from: UnsafeRawBufferPointer(rebasing: buffer[from..<(from + count)]))
                    }
                    return true
                }
            }
            for (index, span) in plan.chunks.spans.enumerated() where index >= plan.resumed {
                let length = Int(span.length)
                let chunk = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<length])
                /// Whether the chunk's bytes in the buffer are the chunk.
                func matches() throws -> Bool {
                    try chunkHasher.restart()
                    chunkHasher.update(UnsafeRawBufferPointer(chunk))
                    return plan.chunks.matches(index, try chunkHasher.finalize())
                }
                var reused: UInt64 = 0, fetched: UInt64 = 0, complete = true
                for piece in plan.pieces[index] {
                    let into = UnsafeMutableRawBufferPointer(rebasing: chunk[Int(piece.offset - span.offset)..<Int(piece.offset - span.offset + piece.length)])
                    if let old = piece.installed {
                        complete = complete && (try? installed?.read(fullyAt: Int64(old), into: into)) == into.count
                        reused += piece.length
                    } else {
                        complete = try complete && fetch(piece.offset, into: into, chunkStart: span.offset)
                        fetched += piece.length
                    }
                }
                let whole = try complete && matches()
                if !whole {
                    // A piece of the installed copy that is not what its index says (a local change,
                    // or a block hash that matched by chance): the whole chunk from the package.
                    if reused > 0 { try planDamaged(from: index) }
                    // Segments inflated after the installed bytes of this chunk used them as
                    // their dictionary: not kept.
                    segmentReader?.forget()
                    let again = try reused > 0 && fetch(span.offset, into: chunk, chunkStart: span.offset)
                    guard again, try matches() else {
                        throw Installer.error(
                            for: .modified, "'\(file.path)' does not match the chunk index in the manifest (chunk \(index) at \(span.offset))",
                            package: package, entry: file.path)
                    }
                    (reused, fetched) = (0, span.length)
                }
                if fetched == 0 { counts.reused += 1 } else { counts.fetched += 1 }
                counts.bytesReused += reused
                counts.bytesFetched += fetched
                let bytes = UnsafeRawBufferPointer(chunk)
                try hashers.update(bytes)
                try writer.write(bytes)
            }
        } catch let failure as SignetError where failure.code == .network || failure.code == .packageChanged || failure.code == .interrupted {
            // The staging tree is kept for the next run (Installer+Phases): so is this file.
            keptForNextRun = true
            throw failure
        }
        let digest: Digest
        switch try hashers.finish() {
        case .signed(let signed): digest = signed
        case .contentMismatch:
            throw Installer.error(
                for: .modified, "'\(file.path)' rebuilt from its chunks does not match the SHA-256 in the manifest", package: package, entry: file.path)
        case .verityMismatch:
            throw Installer.error(for: .modified, ContentHashers.verityMessage(file.path), package: package, entry: file.path)
        }
        let signature = try reusedSignature(file, own: nil, digest: digest, checked: checked, later: later)
        let finished = try finishStaged(
            file, fd: staged.descriptor, writer: writer, copy: nil, signature: signature, sha256: file.sha256,
            signer: checked.key, checked: checked, into: staging)
        kept = true
        return finished
    }
}
