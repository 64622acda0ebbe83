import Foundation
import SignetCore
import SignetCrypto
import SignetArchive

/// The signed package inside an encrypted one (FORMAT.md §8), read in place: an archive input
/// whose byte i is byte i mod 16 KiB of the payload's chunk ⌊i / 16 KiB⌋, each chunk read from
/// the encrypted package and authenticated before any of its bytes is handed out. The archive
/// layer reads it as any package, with the same checks, and nothing decrypted is written to disk.
///
/// Over HTTP range requests (``EncryptedPackage/rangedInput(_:ranged:with:)``) it plans as the
/// ranged input under it does, in the signed package's offsets: each range planned becomes the
/// records that hold it, so an update fetches the records of what a device lacks and nothing
/// else (at most one record more at each end of a range).
///
/// A few chunks are kept (sequential reads decrypt each chunk once; libzip's windows and the
/// hasher read at two places in turn). Reads may come from several threads: one at a time,
/// under a lock.
final class DecryptingInput: PlannedInput {
    let path: String
    let size: Int64
    private let outer: ZipReader
    private let payload: Range<UInt64>
    private let opener: ChunkedOpener
    /// The encrypted package's ranged input, when it is read over HTTP.
    private let ranged: (any PlannedInput)?
    /// Held while a read runs; guards the cache below.
    private let lock = NSLock()
    /// Decrypted chunks, the most recently used last.
    private var cached: [(index: UInt64, bytes: [UInt8])] = []
    private static let cachedChunks = 4
    private var sealed = [UInt8](repeating: 0, count: ChunkedEncryption.sealedChunkSize)

    /// The package `parts` holds, under `packageKey` (its header's commitment checked now),
    /// read through `ranged` when the encrypted package is on a server.
    init(_ parts: EncryptedPackage.Parts, packageKey: [UInt8], name: String, ranged: (any PlannedInput)? = nil) throws {
        var header = [UInt8](repeating: 0, count: ChunkedEncryption.headerSize)
        guard try header.withUnsafeMutableBytes({ try parts.reader.read(stored: parts.payload, at: 0, into: $0) }) else {
            throw SignetError(.packageInvalid, "'\(name)': the encrypted payload ends early", path: name)
        }
        let opener = try ChunkedOpener(
            header: header, sealedSize: UInt64(parts.payload.count), inputKey: packageKey, context: EncryptedPackage.context, name: name)
        path = name
        size = Int64(opener.plaintextSize)
        outer = parts.reader
        payload = parts.payload
        self.opener = opener
        self.ranged = ranged
    }

    /// The bytes of the encrypted package that hold `range` of the signed package: the
    /// records of every chunk it touches.
    func sealedSpan(of range: Range<Int64>) -> Range<Int64>? {
        let lower = max(0, range.lowerBound), upper = min(size, range.upperBound)
        guard lower < upper else { return nil }
        let chunkSize = Int64(ChunkedEncryption.chunkSize)
        let first = UInt64(lower / chunkSize), last = UInt64((upper - 1) / chunkSize)
        let start = payload.lowerBound + ChunkedEncryption.sealedOffset(chunk: first)
        let end = payload.lowerBound + ChunkedEncryption.sealedOffset(chunk: last) + UInt64(opener.sealedSize(ofChunk: last))
        return Int64(start)..<Int64(end)
    }

    func plan(_ ranges: [Range<Int64>], gap: Int64, exactGap: Int64) {
        ranged?.plan(ranges.compactMap(sealedSpan(of:)), gap: gap, exactGap: exactGap)
    }

    /// The package's own entries are planned, as the ranged input plans them for a package
    /// read in the clear.
    func directoryRead(_ directory: CentralDirectory.Directory) throws {
        guard ranged != nil else { return }
        plan(Self.ownEntries(of: directory).spans)
    }

    func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard offset >= 0, offset < size, !buffer.isEmpty else { return 0 }
        let chunkSize = UInt64(ChunkedEncryption.chunkSize)
        let end = min(size, offset + Int64(buffer.count))
        // A read of several chunks (the central directory, a window of entries) is asked for
        // as one range, not a request per record.
        if ranged != nil, UInt64(offset) / chunkSize != UInt64(end - 1) / chunkSize { plan([offset..<end]) }
        lock.lock()
        defer { lock.unlock() }
        var done = 0
        while done < buffer.count, offset + Int64(done) < size {
            let position = UInt64(offset) + UInt64(done)
            let index = position / chunkSize
            let count = try withChunk(index) { chunk in
                let within = Int(position - index * chunkSize)
                let count = min(chunk.count - within, buffer.count - done)
                guard count > 0 else { return 0 }
                UnsafeMutableRawBufferPointer(rebasing: buffer[done..<(done + count)]).copyMemory(
                    from: UnsafeRawBufferPointer(rebasing: chunk[within..<(within + count)]))
                return count
            }
            guard count > 0 else { break }
            done += count
        }
        return done
    }

    /// Runs `body` on chunk `index`, decrypted and authenticated (kept, or read now).
    private func withChunk<R>(_ index: UInt64, _ body: (UnsafeRawBufferPointer) -> R) throws -> R {
        if let at = cached.lastIndex(where: { $0.index == index }) {
            let hit = cached.remove(at: at)
            cached.append(hit)
            return hit.bytes.withUnsafeBytes(body)
        }
        let name = path
        let sealedSize = opener.sealedSize(ofChunk: index)
        let start = ChunkedEncryption.sealedOffset(chunk: index)
        let (outer, payload) = (self.outer, self.payload)
        guard
            try sealed.withUnsafeMutableBytes({
                try outer.read(stored: payload, at: start, into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<sealedSize]))
            })
        else { throw SignetError(.packageInvalid, "'\(name)': the encrypted payload ends early", path: name) }
        let bytes = try opener.open(sealed[0..<sealedSize], chunk: index, name: name)
        if cached.count == Self.cachedChunks { cached.removeFirst() }
        cached.append((index, bytes))
        return bytes.withUnsafeBytes(body)
    }
}
