import Foundation
import SignetCore
import SignetCrypto
import SignetArchive

/// The signed package inside an encrypted one (FORMAT.md §8), read in place: an archive input
/// whose byte i is byte i mod 16 KiB of the payload's chunk ⌊i / 16 KiB⌋, each chunk read from
/// the encrypted package and authenticated before any of its bytes is handed out. The archive
/// layer reads it as any package, with the same checks, and nothing decrypted is written to disk.
///
/// One chunk is kept (sequential reads decrypt each chunk once). Reads may come from several
/// threads (libzip's windows, the hasher): one at a time, under a lock.
final class DecryptingInput: ArchiveInput {
    let path: String
    let size: Int64
    private let outer: ZipReader
    private let payload: Range<UInt64>
    private let opener: ChunkedOpener
    /// Held while a read runs; guards the cache below.
    private let lock = NSLock()
    private var cachedIndex: UInt64 = .max
    private var cached: [UInt8] = []
    private var sealed = [UInt8](repeating: 0, count: ChunkedEncryption.sealedChunkSize)

    /// The package `parts` holds, under `packageKey` (its header's commitment checked now).
    init(_ parts: EncryptedPackage.Parts, packageKey: [UInt8], name: String) throws {
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
    }

    func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        guard offset >= 0, offset < size, !buffer.isEmpty else { return 0 }
        let name = path
        lock.lock()
        defer { lock.unlock() }
        var done = 0
        let chunkSize = UInt64(ChunkedEncryption.chunkSize)
        while done < buffer.count, offset + Int64(done) < size {
            let position = UInt64(offset) + UInt64(done)
            let index = position / chunkSize
            if cachedIndex != index {
                let sealedSize = opener.sealedSize(ofChunk: index)
                let start = ChunkedEncryption.sealedOffset(chunk: index)
                let (outer, payload) = (self.outer, self.payload)
                guard
                    try sealed.withUnsafeMutableBytes({
                        try outer.read(stored: payload, at: start, into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<sealedSize]))
                    })
                else { throw SignetError(.packageInvalid, "'\(name)': the encrypted payload ends early", path: name) }
                cachedIndex = .max
                cached = try opener.open(sealed[0..<sealedSize], chunk: index, name: name)
                cachedIndex = index
            }
            let within = Int(position - index * chunkSize)
            let count = min(cached.count - within, buffer.count - done)
            guard count > 0 else { break }
            cached.withUnsafeBytes { source in
                UnsafeMutableRawBufferPointer(rebasing: buffer[done..<(done + count)]).copyMemory(
                    from: UnsafeRawBufferPointer(rebasing: source[within..<(within + count)]))
            }
            done += count
        }
        return done
    }
}
