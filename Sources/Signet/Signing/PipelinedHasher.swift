import Foundation

/// Digests computed on the second core while the caller reads, checks and writes the same
/// bytes on the first: for a large resource, unpack's one thread otherwise spends 40% of its
/// time in SHA-256 beside libzip's CRC-32 and the copies to and from the kernel (`perf` of a
/// 256 MiB stored package; issue 28). The bytes are copied into one of four 1 MiB buffers and
/// hashed in order; the caller waits only when all four are queued. Memory: 4 MiB, whatever
/// the size of the resource.
final class PipelinedHasher {
    /// Resources from this size on are hashed this way; smaller ones are not worth a hand-off.
    static let threshold: UInt64 = 8 << 20
    static let bufferSize = 1 << 20
    static let bufferCount = 4

    /// What the second core uses: held by every queued block, so it (and its buffers) outlive
    /// a hasher dropped mid-way (a read that failed) until the last block has run; freed on
    /// whichever thread lets go of it last, never waiting on the queue.
    private final class Shared: @unchecked Sendable {
        let hashers: [Digest.Hasher]
        let slots = DispatchSemaphore(value: PipelinedHasher.bufferCount)
        let lock = NSLock()
        /// Buffers not being filled or hashed (under `lock`).
        var idle: [UnsafeMutableRawBufferPointer] = []
        var all: [UnsafeMutableRawBufferPointer] = []

        init(_ hashers: [Digest.Hasher]) { self.hashers = hashers }

        deinit { for buffer in all { buffer.deallocate() } }

        func take() -> UnsafeMutableRawBufferPointer {
            slots.wait()
            lock.lock()
            defer { lock.unlock() }
            if let buffer = idle.popLast() { return buffer }
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: PipelinedHasher.bufferSize, alignment: 64)
            all.append(buffer)
            return buffer
        }

        func hash(_ buffer: UnsafeMutableRawBufferPointer, count: Int) {
            let bytes = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
            for hasher in hashers { hasher.update(bytes) }
            lock.lock()
            idle.append(buffer)
            lock.unlock()
            slots.signal()
        }
    }

    /// A full buffer on its way to the second core, which alone touches it until it is idle again.
    private struct Handed: @unchecked Sendable {
        let buffer: UnsafeMutableRawBufferPointer
    }

    private let shared: Shared
    private let queue = DispatchQueue(label: "signet.pipelined-hash")
    /// The buffer being filled by the caller, and how much of it is.
    private var current: UnsafeMutableRawBufferPointer?
    private var filled = 0

    init(_ algorithms: [DigestAlgorithm]) throws {
        shared = Shared(try algorithms.map { try Digest.Hasher($0) })
    }

    /// Copies `chunk` into the buffers, handing each full one to the second core.
    func update(_ chunk: UnsafeRawBufferPointer) {
        var offset = 0
        while offset < chunk.count {
            let buffer = current ?? shared.take()
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
        queue.sync {}
        return try shared.hashers.map { try $0.finalize() }
    }

    private func handOver() {
        guard let buffer = current else { return }
        let handed = Handed(buffer: buffer)
        let count = filled
        current = nil
        filled = 0
        queue.async { [shared] in shared.hash(handed.buffer, count: count) }
    }
}
