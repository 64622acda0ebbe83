#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetSystem
internal import CSignetZlib
internal import SystemPackage
import SignetCore
import SignetCrypto
import SignetArchive

/// `pack --encrypt-to` in one pass (FORMAT.md §8): the signed package libzip writes is sealed
/// as it is written, each 16 KiB chunk as soon as it is final, into the encrypted package's
/// payload entry; the plaintext is never written anywhere.
///
/// libzip rewrites each entry's local header once the entry's data is written
/// (``ArchiveSink``): the chunks under the header being written are held until libzip has
/// rewritten it, every other chunk is sealed once the archive has grown past it. A rewrite that
/// reaches a sealed chunk is refused (the package is not written) rather than guessed at.
/// Memory: the chunk being filled and the few under one local header.
///
/// The encrypted package is written around the payload (``finish(envelope:)``): a zip of two
/// stored entries, the payload first, whose local header (ZIP64, so that its size needs no
/// room decided in advance) is written last, once the payload's CRC-32 and size are known.
final class SealingOutput: ArchiveSink {
    private let file: FileDescriptor
    private let path: String
    private let sealer: ChunkedSealer
    /// Chunks not sealed yet, by number: the one being filled and the held ones.
    private var open: [UInt64: [UInt8]] = [:]
    /// The end of what libzip wrote.
    private var end: UInt64 = 0
    /// Chunks that libzip may still rewrite (under the local header that starts at the last
    /// return to the end).
    private var held: ClosedRange<UInt64>? = nil
    /// The CRC-32 of the payload's bytes, in runs of consecutive sealed chunks (chunks seal out
    /// of order where one was held): (first chunk, past the last, CRC, bytes). The header's own
    /// (`headerCRC`) goes in front of the one run left at the end.
    private var runs: [(first: UInt64, end: UInt64, crc: UInt, bytes: UInt64)] = []
    private var headerCRC: UInt = 0
    /// Sealed bytes waiting to be written at `pendingOffset` (consecutive chunks coalesce).
    private var pending: [UInt8] = []
    private var pendingOffset: UInt64 = 0
    private var writebackStart: UInt64 = 0

    /// The last chunk's number, once the archive is complete (it may be short).
    private var last = UInt64.max

    static let chunkSize = UInt64(ChunkedEncryption.chunkSize)
    /// The payload entry's local header: 30 bytes, its name, a ZIP64 extra field of two sizes.
    static let payloadHeaderSize = 30 + EncryptedPackage.payloadName.utf8.count + 20
    /// A local header is at most 30 bytes, a name and an extra field of up to 64 KiB each.
    static let longestLocalHeader: UInt64 = 30 + 65_535 + 65_535

    /// Seals into `file` (empty; the encrypted package's temporary, named `path` in messages)
    /// under `key`.
    init(file: Int32, path: String, key: [UInt8]) throws {
        self.file = FileDescriptor(rawValue: file)
        self.path = path
        sealer = try ChunkedSealer(inputKey: key, context: EncryptedPackage.context)
        headerCRC = signet_crc32(0, sealer.header, sealer.header.count)
        pendingOffset = UInt64(Self.payloadHeaderSize)
        pending = sealer.header
        pending.reserveCapacity(Self.flushSize)
    }

    static let flushSize = 1 << 20
    static let writebackStep: UInt64 = 8 << 20

    /// Where chunk `index` starts in the file.
    private static func fileOffset(ofChunk index: UInt64) -> UInt64 {
        UInt64(payloadHeaderSize) + ChunkedEncryption.sealedOffset(chunk: index)
    }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        guard !bytes.isEmpty else { return }
        var done = 0
        while done < bytes.count {
            let position = offset + UInt64(done)
            let index = position / Self.chunkSize, within = Int(position % Self.chunkSize)
            let count = min(bytes.count - done, Int(Self.chunkSize) - within)
            let started = open[index] != nil
            var chunk = open.removeValue(forKey: index) ?? []
            // Bytes go where an open chunk has them (a rewrite) or right after (the archive
            // growing); a new chunk starts at the end. A chunk sealed already, or a gap, is a way
            // of writing this writer cannot follow.
            guard offset <= end, started ? within <= chunk.count : (position >= end && within == 0) else {
                throw SignetError(
                    .io,
                    position < end
                        ? "the package's archive was rewritten where it was already encrypted (at byte \(position)); nothing was written"
                        : "the package's archive was written with a gap (at byte \(position)); nothing was written", path: path)
            }
            if chunk.isEmpty { chunk.reserveCapacity(Int(Self.chunkSize)) }
            let source = UnsafeRawBufferPointer(rebasing: bytes[done..<(done + count)])
            // Overwritten where the chunk has bytes, appended after them.
            let overlap = min(count, chunk.count - within)
            if overlap > 0 {
                chunk.withUnsafeMutableBytes {
                    $0.baseAddress!.advanced(by: within).copyMemory(from: source.baseAddress!, byteCount: overlap)
                }
            }
            if overlap < count { chunk.append(contentsOf: UnsafeRawBufferPointer(rebasing: source[overlap...])) }
            open[index] = chunk
            done += count
        }
        end = max(end, offset + UInt64(bytes.count))
        try sealFinalChunks()
    }

    func resumed(at offset: UInt64) throws {
        // What libzip rewrote behind the end is written now: the held chunks are final.
        held = offset / Self.chunkSize...((offset + Self.longestLocalHeader) / Self.chunkSize)
        try sealFinalChunks()
    }

    /// Seals every chunk the archive has grown past that is not held. (On libzip's thread: a
    /// worker beside it measured no faster, the second core being busy hashing.)
    private func sealFinalChunks() throws {
        let complete = end / Self.chunkSize
        for index in open.keys.sorted() where index < complete && !(held?.contains(index) ?? false) {
            try seal(index, open.removeValue(forKey: index)!)
        }
    }

    /// Seals chunk `index` (full, or the last) and queues its bytes for writing.
    private func seal(_ index: UInt64, _ chunk: [UInt8]) throws {
        guard index == last || chunk.count == Int(Self.chunkSize) else {
            throw SignetError(.io, "the package's archive was written with a gap (in chunk \(index)); nothing was written", path: path)
        }
        // Sealed straight into the bytes waiting to be written.
        let at = Self.fileOffset(ofChunk: index)
        let sealedSize = chunk.count + ChunkedEncryption.tagSize
        if at != pendingOffset + UInt64(pending.count) || pending.count + sealedSize > Self.flushSize { try flush() }
        if pending.isEmpty { pendingOffset = at }
        let start = pending.count
        try sealer.seal(chunk: index, chunk, into: &pending)
        let crc = pending.withUnsafeBufferPointer { signet_crc32(0, $0.baseAddress! + start, $0.count - start) }
        record(index, crc: crc, bytes: UInt64(sealedSize))
    }

    /// Adds chunk `index`'s CRC to the runs, merging it with its neighbours.
    private func record(_ index: UInt64, crc: UInt, bytes: UInt64) {
        if let before = runs.firstIndex(where: { $0.end == index }) {
            runs[before].crc = signet_crc32_combine(runs[before].crc, crc, Int64(bytes))
            runs[before].bytes += bytes
            runs[before].end = index + 1
            if let after = runs.firstIndex(where: { $0.first == index + 1 }) {
                let next = runs.remove(at: after)
                let merged = runs.firstIndex { $0.end == index + 1 }!
                runs[merged].crc = signet_crc32_combine(runs[merged].crc, next.crc, Int64(next.bytes))
                runs[merged].bytes += next.bytes
                runs[merged].end = next.end
            }
        } else if let after = runs.firstIndex(where: { $0.first == index + 1 }) {
            runs[after].crc = signet_crc32_combine(crc, runs[after].crc, Int64(runs[after].bytes))
            runs[after].bytes += bytes
            runs[after].first = index
        } else {
            runs.append((index, index + 1, crc, bytes))
        }
    }

    private func flush() throws {
        guard !pending.isEmpty else { return }
        do {
            try pending.withUnsafeBytes { try file.write(all: $0, at: Int64(pendingOffset)) }
        } catch {
            throw SignetError.posix(error, "cannot write the encrypted package", path: path)
        }
        let reached = pendingOffset + UInt64(pending.count)
        pending.removeAll(keepingCapacity: true)
        if reached >= writebackStart + Self.writebackStep {
            // As the plain package's output does: most of it on its way to disk before the fsync.
            _ = signet_start_writeback(file.rawValue, Int64(writebackStart), Int64(reached - writebackStart))
            writebackStart = reached
        }
    }

    /// Seals what is left (the last chunk, shorter than 16 KiB, possibly empty) and writes the
    /// encrypted package around the payload: its local header, then the envelope entry, the
    /// central directory and the end records. Returns the signed package's size.
    func finish(envelope: [UInt8]) throws -> UInt64 {
        held = nil
        last = end / Self.chunkSize
        try sealFinalChunks()
        try seal(last, open.removeValue(forKey: last) ?? [])
        guard open.isEmpty, runs.count == 1, runs[0].first == 0, runs[0].end == last + 1 else {
            throw SignetError(.io, "the package's archive left part of its payload unsealed; nothing was written", path: path)
        }
        try flush()
        let payloadSize = UInt64(sealer.header.count) + runs[0].bytes
        let payloadCRC = UInt32(truncatingIfNeeded: signet_crc32_combine(headerCRC, runs[0].crc, Int64(runs[0].bytes)))
        let container = EncryptedContainer(payloadSize: payloadSize, payloadCRC: payloadCRC, envelope: envelope)
        do {
            try container.payloadLocalHeader.withUnsafeBytes { try file.write(all: $0, at: 0) }
            try container.trailer.withUnsafeBytes { try file.write(all: $0, at: Int64(UInt64(Self.payloadHeaderSize) + payloadSize)) }
        } catch {
            throw SignetError.posix(error, "cannot write the encrypted package", path: path)
        }
        return end
    }
}
