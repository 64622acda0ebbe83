import SignetCore
import SignetCrypto
import SignetManifest
import SignetArchive

/// Reads a package's chunk-index entry (FORMAT.md §2, "The chunk-index entry") by
/// range: whole slices, each checked against the SHA-256 the verified manifest binds before a
/// byte of it is used, and kept once checked. Over HTTPS the caller plans the slices first
/// (``packageRanges(_:)``), so that the sections of several files arrive in one request.
package final class ChunkIndexReader {
    private let reader: ZipReader
    private let entry: ZipReader.Entry
    private let declared: ChunkIndexEntry
    /// Where the entry's bytes are (its local header checked once).
    private var data: Range<UInt64>? = nil
    /// Slices read and checked, by number.
    private var slices: [Int: [UInt8]] = [:]

    /// The reader for `manifest`'s entry, once `checkManifest` established that the archive
    /// holds it at the declared size; nil for a package without one.
    package init?(manifest: Manifest, layout: PackageReader.Layout, reader: ZipReader) {
        guard let declared = manifest.chunkIndex, let entry = layout.chunkIndex, entry.size == declared.size else { return nil }
        self.reader = reader
        self.entry = entry
        self.declared = declared
    }

    /// The package bytes that hold the entry's local header (to plan before anything else).
    package var headerSpan: Range<Int64>? {
        reader.span(of: entry).map {
            Int64($0.lowerBound)..<min(Int64($0.upperBound), Int64($0.lowerBound) + 30 + Int64(TreeLayout.chunkIndex.utf8.count) + 128)
        }
    }

    private func dataRange() throws -> Range<UInt64> {
        if let data { return data }
        guard let found = try reader.storedData(of: entry), UInt64(found.count) == declared.size else {
            throw refusal("its local header does not agree with the directory")
        }
        data = found
        return found
    }

    private func refusal(_ reason: String) -> SignetError {
        SignetError(
            SignetError.Code(PackageFailure.modified), "\(TreeLayout.chunkIndex) in '\(reader.path)' cannot be used: \(reason)", path: reader.path,
            entry: TreeLayout.chunkIndex)
    }

    /// The package's byte ranges of the slices that hold `ranges` of the entry and were not read
    /// yet, neighbours merged.
    package func packageRanges(_ ranges: [Range<UInt64>]) throws -> [Range<Int64>] {
        let data = try dataRange()
        var numbers = Set<Int>()
        for range in ranges where range.upperBound <= declared.size {
            for number in declared.slices(covering: range) where slices[number] == nil { numbers.insert(number) }
        }
        var result: [Range<Int64>] = []
        for number in numbers.sorted() {
            let bytes = declared.slice(number)
            let range = Int64(data.lowerBound + bytes.lowerBound)..<Int64(data.lowerBound + bytes.upperBound)
            if let last = result.last, last.upperBound == range.lowerBound {
                result[result.count - 1] = last.lowerBound..<range.upperBound
            } else {
                result.append(range)
            }
        }
        return result
    }

    /// Bytes `range` of the entry, from slices that match the manifest.
    package func bytes(_ range: Range<UInt64>) throws -> [UInt8] {
        guard range.upperBound <= declared.size else { throw refusal("bytes \(range) lie past its \(declared.size)") }
        let data = try dataRange()
        var result: [UInt8] = []
        result.reserveCapacity(range.count)
        let hasher = try Digest.Hasher(.sha256)
        for number in declared.slices(covering: range) {
            let bounds = declared.slice(number)
            if slices[number] == nil {
                var slice = [UInt8](repeating: 0, count: bounds.count)
                let read = try slice.withUnsafeMutableBytes { try reader.read(stored: data, at: bounds.lowerBound, into: $0) }
                guard read else { throw refusal("slice \(number) could not be read") }
                try hasher.restart()
                slice.withUnsafeBytes { hasher.update($0) }
                guard try hasher.finalize().bytes.elementsEqual(declared.sliceHash(number)) else {
                    throw refusal("slice \(number) (bytes \(bounds.lowerBound) to \(bounds.upperBound)) does not match the SHA-256 the manifest binds")
                }
                slices[number] = slice
            }
            let slice = slices[number]!
            let from = Int(max(range.lowerBound, bounds.lowerBound) - bounds.lowerBound), to = Int(min(range.upperBound, bounds.upperBound) - bounds.lowerBound)
            result += slice[from..<to]
        }
        return result
    }

    /// The ranges of the entry that ``chunks(of:)`` reads for `file`.
    package static func chunkRanges(of file: Manifest.File) -> [Range<UInt64>] {
        guard let indexed = file.indexed else { return [] }
        return [indexed.chunkBytes.lowerBound..<indexed.segmentBytes.upperBound]
    }

    /// `file`'s chunk records and segment lengths, from the entry (a file whose index is inline:
    /// the manifest's).
    package func chunks(of file: Manifest.File) throws -> (chunks: ChunkIndex, deflate: DeflateIndex?) {
        guard let indexed = file.indexed else {
            guard let chunks = file.chunks else { throw refusal("'\(file.path)' is not chunked") }
            return (chunks, file.deflate)
        }
        let bytes = try bytes(indexed.chunkBytes.lowerBound..<indexed.segmentBytes.upperBound)
        let split = indexed.chunkBytes.count
        do {
            return try bytes.withUnsafeBytes { raw in
                var chunks = try ChunkIndex(records: UnsafeRawBufferPointer(rebasing: raw[0..<split]), size: file.size, hashSize: ChunkIndexEntry.hashSize)
                guard chunks.count == indexed.chunkCount else { throw ChunkIndex.Refused(reason: "another chunk count") }
                chunks.fillBlocks(UnsafeRawBufferPointer(start: nil, count: 0), from: 0, total: ChunkIndex.blocks(of: file.size))
                let deflate = indexed.deflated ? try DeflateIndex(lengths: UnsafeRawBufferPointer(rebasing: raw[split...]), size: file.size) : nil
                return (chunks, deflate)
            }
        } catch let refused as ChunkIndex.Refused {
            throw SignetError(
                .malformedManifest, "the chunk index of '\(file.path)' in \(TreeLayout.chunkIndex) is malformed: \(refused.reason)", path: reader.path,
                entry: TreeLayout.chunkIndex)
        }
    }

    /// The entry's bytes of `file`'s block hints for `blocks` (block numbers).
    package static func blockRange(of file: Manifest.File, blocks: Range<Int>) -> Range<UInt64>? {
        guard let indexed = file.indexed, !blocks.isEmpty else { return nil }
        let hint = UInt64(indexed.blockBytes.count) / UInt64(ChunkIndex.blocks(of: file.size)) // bytes per block's hint
        let start = indexed.blockBytes.lowerBound + UInt64(blocks.lowerBound) * hint
        return start..<min(indexed.blockBytes.upperBound, indexed.blockBytes.lowerBound + UInt64(blocks.upperBound) * hint)
    }

    /// Sets `chunks`' hints of `blocks` from the entry (an inline index has every hint already).
    package func fillBlocks(_ chunks: inout ChunkIndex, of file: Manifest.File, blocks: Range<Int>) throws {
        guard let range = Self.blockRange(of: file, blocks: blocks) else { return }
        let hints = try bytes(range)
        hints.withUnsafeBytes { chunks.fillBlocks($0, from: blocks.lowerBound, total: ChunkIndex.blocks(of: file.size)) }
    }

    /// Reads the whole entry in one pass (`inspect --pubkey`; local or ranged): every slice
    /// against its hash, and every file's section as an index (chunk lengths, their sum, the
    /// segment lengths). Nil when all is as the manifest binds, else why not. Memory: a slice
    /// and a record.
    package func check(_ files: [Manifest.File]) -> String? {
        var validator = SectionValidator(files: files.compactMap { file in file.indexed.map { (file: file, indexed: $0) } })
        var slice: [UInt8] = []
        slice.reserveCapacity(ChunkIndexEntry.sliceSize)
        var number = 0
        do {
            let hasher = try Digest.Hasher(.sha256)
            func endSlice() throws {
                try hasher.restart()
                slice.withUnsafeBytes { hasher.update($0) }
                guard try hasher.finalize().bytes.elementsEqual(declared.sliceHash(number)) else {
                    throw refusal(
                        "slice \(number) (bytes \(number * ChunkIndexEntry.sliceSize) to \(number * ChunkIndexEntry.sliceSize + slice.count)) does not match the SHA-256 the manifest binds"
                    )
                }
                try validator.feed(slice)
                slice.removeAll(keepingCapacity: true)
                number += 1
            }
            try reader.read(entry, limit: declared.size, name: TreeLayout.chunkIndex) { bytes in
                var at = 0
                while at < bytes.count {
                    let take = min(ChunkIndexEntry.sliceSize - slice.count, bytes.count - at)
                    slice += bytes[at..<(at + take)]
                    at += take
                    if slice.count == ChunkIndexEntry.sliceSize { try endSlice() }
                }
            }
            if !slice.isEmpty { try endSlice() }
            return nil
        } catch let error as SignetError {
            return error.reason
        } catch let refused as ChunkIndex.Refused {
            return "\(TreeLayout.chunkIndex) in '\(reader.path)' cannot be used: \(refused.reason)"
        } catch {
            return "\(error)"
        }
    }
}

/// Checks the chunk-index entry's sections as its checked bytes stream by (``ChunkIndexReader/check(_:)``):
/// past the block hints, each file's chunk records — each length within bounds, the lengths
/// adding up to the file's size — then its segment lengths, each within bounds.
private struct SectionValidator {
    let files: [(file: Manifest.File, indexed: IndexedChunks)]
    /// Where the records part starts (the hints before it are not checked: any bytes are hints).
    private let recordsStart: UInt64
    /// Bytes of the entry seen.
    private var seen: UInt64 = 0
    private var current = 0
    /// Bytes into the current file's records and segments, and what its records add up to.
    private var position: UInt64 = 0
    private var total: UInt64 = 0
    private var pending: [UInt8] = []

    init(files: [(file: Manifest.File, indexed: IndexedChunks)]) {
        self.files = files
        recordsStart = files.first?.indexed.recordsOffset ?? 0
    }

    mutating func feed(_ bytes: [UInt8]) throws {
        for byte in bytes {
            seen += 1
            guard seen > recordsStart, current < files.count else { continue }
            let (file, indexed) = files[current]
            let chunkBytes = UInt64(indexed.chunkBytes.count), segmentBytes = UInt64(indexed.segmentBytes.count)
            pending.append(byte)
            if position < chunkBytes, pending.count == ChunkIndexEntry.recordSize {
                let length = UInt64(pending[0]) << 16 | UInt64(pending[1]) << 8 | UInt64(pending[2])
                let last = position + 1 == chunkBytes
                guard length >= 1, length <= UInt64(ContentChunker.maximum), last || length >= UInt64(ContentChunker.minimum) else {
                    throw ChunkIndex.Refused(reason: "'\(file.path)' has a chunk of \(length) bytes")
                }
                total += length
                pending.removeAll(keepingCapacity: true)
                if last, total != file.size {
                    throw ChunkIndex.Refused(reason: "'\(file.path)' has chunks of \(total) bytes in all for a file of \(file.size)")
                }
            } else if position >= chunkBytes, pending.count == 2 {
                let length = Int(pending[0]) << 8 | Int(pending[1])
                guard length >= 1, length <= DeflateIndex.segmentSize + 64 else {
                    throw ChunkIndex.Refused(reason: "'\(file.path)' has a deflate segment of \(length) compressed bytes")
                }
                pending.removeAll(keepingCapacity: true)
            }
            position += 1
            if position == chunkBytes + segmentBytes {
                current += 1
                (position, total) = (0, 0)
            }
        }
    }
}
