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

extension RangedUpdate {
    /// A changed large resource that may be rebuilt rather than fetched whole.
    struct ChunkCandidate {
        let index: Int
        let file: Manifest.File
        /// The installed file of its path: its size, and its chunk index when DIR's manifest
        /// carries it inline (packages before the chunk-index entry). Nil: none to reuse.
        let installed: (size: UInt64, inline: ChunkIndex?)?
    }

    /// The plans of `candidates` (manifest order), nil for one fetched whole (a resumed file
    /// that will not be continued is removed again). Three steps, each one request over HTTPS:
    /// the entries' local headers with the chunk records (and segment lengths) of every
    /// candidate; then, once the installed copies were scanned, the block hints of just the
    /// chunks they lack (FORMAT.md §5, "Chunked resources"); the plans read them.
    func chunkPlans(_ candidates: [ChunkCandidate], job: Installer.Job, staging: Staging, manifest: Manifest?) throws -> [ChunkPlan?] {
        guard !candidates.isEmpty else { return [] }
        let index = manifest.flatMap { ChunkIndexReader(manifest: $0, layout: job.layout, reader: job.reader) }
        var first: [Range<Int64>] = candidates.compactMap { headerSpan(of: $0.file, job: job) }
        if let index {
            first += index.headerSpan.map { [$0] } ?? []
            archive.plan(first)
            archive.plan(try index.packageRanges(candidates.flatMap { ChunkIndexReader.chunkRanges(of: $0.file) }))
        } else {
            archive.plan(first)
        }
        var ready: [(chunks: ChunkIndex, deflate: DeflateIndex?, installed: (chunks: ChunkIndex, size: UInt64)?, resumed: Int)?] = []
        var hints: [Range<UInt64>] = []
        for candidate in candidates {
            let file = candidate.file
            guard let (chunks, deflate) = try index.map({ try $0.chunks(of: file) }) ?? file.chunks.map({ ($0, file.deflate) }) else {
                ready.append(nil)
                continue
            }
            let resumed = resumedChunks(file, chunks: chunks, staging: staging) ?? 0
            var old: (chunks: ChunkIndex, size: UInt64)? = nil
            if let installed = candidate.installed, installed.size > 0 {
                if let inline = installed.inline, inline.blockScheme == chunks.blockScheme {
                    old = (inline, installed.size)
                } else if let scanned = scan(file.path, blocks: chunks.blockScheme) {
                    old = (scanned, installed.size)
                }
            }
            guard resumed > 0 || old != nil else { ready.append(nil); continue }
            if let old, file.indexed != nil {
                hints += ChunkPlan.blocksToCompare(chunks, installed: old.chunks, from: resumed).compactMap {
                    ChunkIndexReader.blockRange(of: file, blocks: $0)
                }
            }
            ready.append((chunks, deflate, old, resumed))
        }
        if let index, !hints.isEmpty { archive.plan(try index.packageRanges(hints)) }
        var plans: [ChunkPlan?] = []
        for (candidate, made) in zip(candidates, ready) {
            guard var made else { plans.append(nil); continue }
            if let index, let old = made.installed, candidate.file.indexed != nil {
                for blocks in ChunkPlan.blocksToCompare(made.chunks, installed: old.chunks, from: made.resumed) {
                    try index.fillBlocks(&made.chunks, of: candidate.file, blocks: blocks)
                }
            }
            let plan = chunkPlan(candidate.file, chunks: made.chunks, deflate: made.deflate, installed: made.installed, resumed: made.resumed, job: job)
            if plan == nil, made.resumed > 0 { staging.removeFile(candidate.file.path) }
            plans.append(plan)
        }
        return plans
    }

    /// The bytes that hold `file`'s local header (its fixed part, its name and room for extra
    /// fields): planned before the entry's data is located.
    private func headerSpan(of file: Manifest.File, job: Installer.Job) -> Range<Int64>? {
        span(of: file, job: job).map { $0.lowerBound..<min($0.upperBound, $0.lowerBound + 30 + Int64(file.path.utf8.count) + 128) }
    }

    /// The installed file `path`'s chunks and block hints of `blocks`' scheme, read from it as
    /// casync and zsync read their seed (an installed release whose manifest has no inline
    /// index: its indexes were in its package's entry, which the device read only in part).
    /// Nil when it cannot be read; what it holds is checked chunk by chunk as it is used.
    private func scan(_ path: String, blocks: ChunkIndex.BlockScheme) -> ChunkIndex? {
        guard let root, let opened = try? Paths.open(path, beneath: root.descriptor),
            let source = try? InputFile.adopt(opened, path: destination + "/" + path, what: "installed file"),
            let chunker = try? ContentChunker(blocks: blocks)
        else { return nil }
        guard (try? source.forEachChunk { try chunker.update($0) }) != nil else { return nil }
        return try? chunker.finish()
    }

    /// How `file` is rebuilt from `installed` (its chunks and size): nil when its entry is not
    /// stored or deflated in segments, or shares no chunk. Reads the entry's local header
    /// (planned first).
    private func chunkPlan(
        _ file: Manifest.File, chunks: ChunkIndex, deflate: DeflateIndex?, installed: (chunks: ChunkIndex, size: UInt64)?,
        resumed: Int, job: Installer.Job
    ) -> ChunkPlan? {
        guard let entry = job.layout.resource(file.path), entry.size == file.size else { return nil }
        let data: Range<UInt64>
        var segments: [UInt64]? = nil
        if entry.method == 0, let stored = try? job.reader.storedData(of: entry) {
            data = stored
        } else if let deflate, deflate.compressedSize == entry.compressedSize, let deflated = try? job.reader.deflatedData(of: entry) {
            // A deflated entry whose segments the signed index lists.
            data = deflated
            segments = deflate.offsets
        } else {
            return nil
        }
        let base = installed.flatMap { ChunkPlan(chunks: chunks, installed: $0.chunks, installedSize: $0.size, data: data, segments: segments) }
        guard resumed > 0 else { return base }
        return ChunkPlan(resuming: resumed, chunks: chunks, data: data, segments: segments, base: base)
    }

    /// How many leading chunks of `file` an interrupted run left staged (FORMAT.md §5, "Resumed
    /// inside a file"): a shorter file of its path in a tree taken over is moved into `staging`
    /// and its chunks are hashed in order against the signed index; nil (nothing moved, or the
    /// file removed again) when not one chunk matches. A file of the right size was taken whole
    /// before this is asked.
    private func resumedChunks(_ file: Manifest.File, chunks: ChunkIndex, staging: Staging) -> Int? {
        guard !leftovers.trees.isEmpty, file.size > 0,
            leftovers.trees.contains(where: { staging.moveIn(file.path, from: $0.root.descriptor, below: file.size) })
        else { return nil }
        guard let opened = try? staging.openFile(file.path) else { return nil }
        let count = ChunkPlan.verifiedChunks(of: opened.descriptor, chunks: chunks)
        if count == 0 { staging.removeFile(file.path) }
        return count > 0 ? count : nil
    }
}

extension RangedUpdate {
    /// For files without a chunk index that an interrupted run of the same package left cut
    /// short (moved into `staging`): where each entry's bytes are and how much is staged, once
    /// their local headers arrived (one request); nil, with the staged file removed, where the
    /// entry is not stored as the directory says.
    func continuations(
        _ files: [(index: Int, file: Manifest.File)], job: Installer.Job,
        staging: Staging
    ) -> [(index: Int, file: Manifest.File, continuation: (data: Range<UInt64>, from: UInt64)?)] {
        guard !files.isEmpty else { return [] }
        archive.plan(files.compactMap { headerSpan(of: $0.file, job: job) })
        return files.map { index, file in
            var info = stat()
            guard let entry = job.layout.resource(file.path), entry.size == file.size, let data = try? job.reader.storedData(of: entry),
                let opened = try? staging.openFile(file.path), fstat(opened.descriptor.rawValue, &info) == 0,
                info.st_size > 0, UInt64(info.st_size) < file.size
            else {
                staging.removeFile(file.path)
                return (index, file, nil)
            }
            return (index, file, (data, UInt64(info.st_size)))
        }
    }
}

extension Installer.Job {
    /// Stages `file` (stored, without a chunk index) by continuing the copy an interrupted run
    /// of the same package left staged, `from` bytes long: those bytes are hashed where they
    /// are, the rest is read from the entry's bytes at `data` (planned) and written after them,
    /// and the whole file's SHA-256 and signature are checked as for any resource. Nil, with
    /// nothing staged, when the whole does not hash to the manifest (the caller fetches the
    /// entry whole). A transfer that fails keeps the file for the next run.
    func stageContinued(
        _ file: Manifest.File, data: Range<UInt64>, from: UInt64, input: any ArchiveInput, into staging: Staging,
        checked: PackageReader.Checked, later: ((_ signature: [UInt8], _ digest: Digest) -> Void)?
    ) throws -> Staged? {
        var kept = false, keptForNextRun = false
        defer { if !kept && !keptForNextRun { staging.removeFile(file.path) } }
        guard UInt64(data.count) == file.size, from < file.size else { return nil }
        let staged = try staging.openFile(file.path)
        let hashers = try ContentHashers(for: file, algorithm: checked.algorithm)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
        defer { buffer.deallocate() }
        guard try Self.hashStaged(staged.descriptor, upTo: from, into: hashers, buffer: buffer) else { return nil }
        var offset = from
        let writer = Installer.StagedWriter(fd: staged.descriptor, path: file.path, destination: destination, at: Int64(from))
        do {
            while offset < file.size {
                let into = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<Int(min(UInt64(buffer.count), file.size - offset))])
                guard try input.read(fullyAt: Int64(data.lowerBound + offset), into: into) == into.count else { return nil }
                try hashers.update(UnsafeRawBufferPointer(into))
                try writer.write(UnsafeRawBufferPointer(into))
                offset += UInt64(into.count)
            }
        } catch let failure as SignetError where failure.code == .network || failure.code == .packageChanged || failure.code == .interrupted {
            keptForNextRun = true
            throw failure
        }
        // Not the signed content (or a wrong fs-verity digest, which the whole entry's check
        // then names): fetched whole.
        guard case .signed(let digest) = try hashers.finish() else { return nil }
        let signature = try reusedSignature(file, own: nil, digest: digest, checked: checked, later: later)
        let finished = try finishStaged(
            file, fd: staged.descriptor, writer: writer, copy: nil, signature: signature, sha256: file.sha256,
            signer: checked.key, checked: checked, into: staging)
        kept = true
        return finished
    }
}
