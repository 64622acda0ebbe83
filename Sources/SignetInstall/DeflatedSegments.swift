internal import CSignetZlib
import SignetCore
import SignetManifest
import SignetArchive

/// The fetched parts of a chunked, deflated resource (FORMAT.md §2 and §5, `deflate`; issue
/// 51): whole segments of the deflate stream, each read from the package and inflated with the
/// 32 KiB of the file that precede it (already rebuilt) as the dictionary. A segment must inflate
/// to exactly its length — the stream's end only in the last one — or it is not used; the
/// chunk it belongs to then fails its SHA-256 and is fetched again, and a second failure is the
/// package's (`modified`). The last segment inflated is kept, for a chunk that starts inside it.
package final class DeflatedSegments {
    private let input: any ArchiveInput
    private let data: Range<UInt64>
    private let offsets: [UInt64]
    private let fileSize: UInt64
    private let inflater: OpaquePointer
    private var compressed: [UInt8] = []
    private var output = [UInt8](repeating: 0, count: DeflateIndex.segmentSize + 1)
    private var dictionary = [UInt8](repeating: 0, count: 32 * 1024)
    /// The segment whose bytes `output` holds.
    private var cached: Int?

    package init?(input: any ArchiveInput, data: Range<UInt64>, offsets: [UInt64], fileSize: UInt64) {
        guard offsets.count == DeflateIndex.segments(of: fileSize) + 1, let inflater = signet_inflater_new() else { return nil }
        self.input = input
        self.data = data
        self.offsets = offsets
        self.fileSize = fileSize
        self.inflater = inflater
    }

    deinit { signet_inflater_free(inflater) }

    /// Forgets the kept segment (it was inflated with a dictionary that turned out wrong).
    package func forget() { cached = nil }

    /// Fills `into` with the file's bytes from `position`, inflating the segments that hold
    /// them; `preceding(start, buffer)` fills `buffer` with the file's bytes from `start` (the
    /// dictionary, all before `position`). False when a segment does not inflate to its length.
    package func read(
        at position: UInt64, into buffer: UnsafeMutableRawBufferPointer,
        preceding: (UInt64, UnsafeMutableRawBufferPointer) throws -> Bool
    ) throws -> Bool {
        let size = UInt64(DeflateIndex.segmentSize)
        var done = 0
        while done < buffer.count {
            let at = position + UInt64(done)
            let segment = Int(at / size)
            guard segment < offsets.count - 1 else { return false }
            if cached != segment {
                guard try inflate(segment, preceding: preceding) else { return false }
            }
            let start = UInt64(segment) * size
            let length = Int(min(size, fileSize - start))
            let from = Int(at - start)
            let count = min(length - from, buffer.count - done)
            output.withUnsafeBytes { bytes in
                UnsafeMutableRawBufferPointer(rebasing: buffer[done..<(done + count)]).copyMemory(
                    from: UnsafeRawBufferPointer(rebasing: bytes[from..<(from + count)]))
            }
            done += count
        }
        return true
    }

    private func inflate(_ segment: Int, preceding: (UInt64, UnsafeMutableRawBufferPointer) throws -> Bool) throws -> Bool {
        cached = nil
        let size = UInt64(DeflateIndex.segmentSize)
        let start = UInt64(segment) * size
        let length = Int(min(size, fileSize - start))
        let stored = Int(offsets[segment + 1] - offsets[segment])
        if compressed.count < stored { compressed = [UInt8](repeating: 0, count: stored) }
        let read = try compressed.withUnsafeMutableBytes {
            try input.read(fullyAt: Int64(data.lowerBound + offsets[segment]), into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<stored]))
        }
        guard read == stored else { return false }
        let window = Int(min(start, UInt64(dictionary.count)))
        if window > 0 {
            guard try dictionary.withUnsafeMutableBytes({ try preceding(start - UInt64(window), UnsafeMutableRawBufferPointer(rebasing: $0[0..<window])) })
            else { return false }
        }
        let restarted = dictionary.withUnsafeBytes { signet_inflater_restart(inflater, $0.baseAddress?.assumingMemoryBound(to: UInt8.self), window) }
        guard restarted == 0 else { return false }
        // One byte of room more than the segment: a segment that inflates past its length is
        // caught (a deflate bomb stops there).
        var consumed = 0, produced = 0, total = 0, used = 0, result: Int32 = 0
        repeat {
            result = compressed.withUnsafeBytes { input in
                output.withUnsafeMutableBytes { out in
                    signet_inflate(
                        inflater, input.baseAddress!.assumingMemoryBound(to: UInt8.self) + used, stored - used, &consumed,
                        out.baseAddress!.assumingMemoryBound(to: UInt8.self) + total, out.count - total, &produced)
                }
            }
            used += consumed
            total += produced
        } while result == 0 && (consumed > 0 || produced > 0) && used < stored && total < output.count
        let last = segment == offsets.count - 2
        guard result >= 0, used == stored, total == length, last ? result == 1 : result == 0 else { return false }
        cached = segment
        return true
    }
}
