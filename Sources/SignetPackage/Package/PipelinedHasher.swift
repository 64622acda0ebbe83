import Foundation
import SignetCore
import SignetCrypto
import SignetManifest

/// Digests computed on the second core while the caller reads, checks and writes the same
/// bytes on the first: for a large resource, unpack's one thread otherwise spends 40% of its
/// time in SHA-256 beside libzip's CRC-32 and the copies to and from the kernel (`perf` of a
/// 256 MiB stored package). The bytes are copied into one of four 1 MiB buffers and
/// hashed in order; the caller waits only when all four are queued. Memory: 4 MiB, whatever
/// the size of the resource.
///
/// Every path lets go of what it holds: a hasher dropped mid-way (a read that failed, a
/// cancel, a full disk) hands the buffer it was filling back to the pool in `deinit`, and the
/// pool is a count under a condition, not a `DispatchSemaphore` (which traps when it is freed
/// with fewer signals than waits).
package final class PipelinedHasher {
    /// Resources from this size on are hashed this way; smaller ones are not worth a hand-off.
    /// A task-local so that the fuzzer and the tests can send small entries down this path
    /// (`$threshold.withValue(0) { … }`); everything else reads the default.
    @TaskLocal package static var threshold: UInt64 = 8 << 20
    static let bufferSize = 1 << 20
    static let bufferCount = 4

    private let pool: BufferPool
    private let queue = SerialWorker()
    private let hashers: Hashers
    /// The buffer being filled by the caller, and how much of it is.
    private var current: UnsafeMutableRawBufferPointer?
    private var filled = 0

    /// The digests' state: used by the queued blocks, so it outlives a hasher dropped mid-way.
    private final class Hashers: @unchecked Sendable {
        let all: [Digest.Hasher]
        /// Cuts and hashes chunks on the second core too (pack, for a large resource).
        let chunker: ContentChunker?
        /// The chunker's failure (its digests could not finish), reported by ``finalize()``.
        var failure: (any Error)?
        init(_ all: [Digest.Hasher], chunker: ContentChunker? = nil) {
            self.all = all
            self.chunker = chunker
        }
    }

    /// A full buffer on its way to the second core, which alone touches it until it is idle again.
    private struct Handed: @unchecked Sendable {
        let buffer: UnsafeMutableRawBufferPointer
    }

    init(_ algorithms: [DigestAlgorithm], chunker: ContentChunker? = nil) throws {
        hashers = Hashers(try algorithms.map { try Digest.Hasher($0) }, chunker: chunker)
        pool = BufferPool(count: Self.bufferCount, size: Self.bufferSize)
    }

    /// A hasher given up before `finalize` (the read failed or was cancelled): the buffer being
    /// filled goes back; queued blocks still hold the pool and give theirs back as they finish.
    deinit {
        if let current { pool.give(current) }
        queue.stop()
    }

    /// Copies `chunk` into the buffers, handing each full one to the second core.
    func update(_ chunk: UnsafeRawBufferPointer) {
        var offset = 0
        while offset < chunk.count {
            let buffer = current ?? pool.take()
            current = buffer
            let count = min(chunk.count - offset, Self.bufferSize - filled)
            (buffer.baseAddress! + filled).copyMemory(from: chunk.baseAddress! + offset, byteCount: count)
            filled += count
            offset += count
            if filled == Self.bufferSize { handOver() }
        }
    }

    /// Waits for every byte to be hashed; the digests, in the order of the algorithms given.
    func finalize() throws -> [Digest] {
        handOver()
        queue.drain()
        if let failure = hashers.failure { throw failure }
        return try hashers.all.map { try $0.finalize() }
    }

    private func handOver() {
        guard let buffer = current else { return }
        let handed = Handed(buffer: buffer)
        let count = filled
        current = nil
        filled = 0
        queue.async { [pool, hashers] in
            let bytes = UnsafeRawBufferPointer(rebasing: handed.buffer[0..<count])
            for hasher in hashers.all { hasher.update(bytes) }
            if let chunker = hashers.chunker, hashers.failure == nil {
                do { try chunker.update(bytes) } catch { hashers.failure = error }
            }
            pool.give(handed.buffer)
        }
    }
}

/// A fixed number of equal buffers shared between threads: ``take()`` waits while all are out,
/// ``give(_:)`` returns one. Allocated on first use, freed when the last holder lets go of the
/// pool, whichever thread that is and however many buffers are out at that moment (nothing
/// here traps on being freed "in use"; a buffer out is simply never touched again).
final class BufferPool: @unchecked Sendable {
    private let condition = NSCondition()
    private let capacity: Int
    private let size: Int
    /// Buffers not in use (under `condition`).
    private var idle: [UnsafeMutableRawBufferPointer] = []
    /// Every buffer allocated, for `deinit`.
    private var all: [UnsafeMutableRawBufferPointer] = []

    init(count: Int, size: Int) {
        capacity = count
        self.size = size
    }

    deinit { for buffer in all { buffer.deallocate() } }

    /// An idle buffer, waiting while every one is out.
    func take() -> UnsafeMutableRawBufferPointer {
        condition.lock()
        defer { condition.unlock() }
        while idle.isEmpty && all.count == capacity { condition.wait() }
        if let buffer = idle.popLast() { return buffer }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 64)
        all.append(buffer)
        return buffer
    }

    /// Returns a buffer taken from this pool.
    func give(_ buffer: UnsafeMutableRawBufferPointer) {
        condition.lock()
        idle.append(buffer)
        condition.signal()
        condition.unlock()
    }
}
