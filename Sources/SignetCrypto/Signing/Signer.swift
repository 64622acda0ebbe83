public import SystemPackage
import Dispatch
import Foundation
import Synchronization
internal import COpenSSL
import SignetCore

/// A raw signature: the modulus-length byte string FORMAT.md §1 describes.
public struct Signature: Sendable, Hashable {
    /// The signature bytes, exactly what `openssl dgst -sign` writes.
    public let bytes: [UInt8]
    /// The scheme that made it.
    public let algorithm: SignatureAlgorithm
    /// The signing key's id.
    public let keyID: KeyID
    /// The digest that was signed.
    public let digest: Digest
}

/// Signs with one private key and one algorithm.
///
/// Files are streamed through the digest in fixed-size chunks, so memory does not grow with
/// their size; several files are hashed in parallel, one per core.
public struct Signer: Sendable {
    /// The signing key.
    public let key: PrivateKey
    /// The signature scheme.
    public let algorithm: SignatureAlgorithm

    /// Creates a signer.
    public init(key: PrivateKey, algorithm: SignatureAlgorithm = .default) {
        self.key = key
        self.algorithm = algorithm
    }

    /// Signs a digest computed elsewhere (for instance while the same bytes were being written).
    public func sign(digest: Digest) throws -> Signature {
        guard digest.algorithm == algorithm.digest else {
            throw SignetError(.usage, "a \(digest.algorithm) digest cannot be signed with \(algorithm.id), which signs \(algorithm.digest)")
        }
        let bytes = try key.token.map { try $0.sign(digest, algorithm: algorithm, length: key.key.signatureSize) } ?? signInMemory(digest)
        // Every signature is checked with the public half before anyone sees it: a faulty key,
        // machine or fault attack must not put out signatures that verify with nothing (or
        // leak the key, as a faulty RSA-CRT signature can). About 1/15 of the signing cost.
        guard Verifier.check(bytes, digest: digest, key: key.publicKey, algorithm: algorithm) else {
            throw SignetError(
                .crypto,
                "the \(algorithm.id) signature just made with key \(key.keyID.short) does not verify with the key's public half: the key or this machine is faulty; nothing was written"
            )
        }
        return Signature(bytes: bytes, algorithm: algorithm, keyID: key.keyID, digest: digest)
    }

    /// With the private key in this process, through OpenSSL.
    private func signInMemory(_ digest: Digest) throws -> [UInt8] {
        OpenSSLErrorQueue.clear()
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, key.key.pointer, nil) else {
            throw OpenSSLErrorQueue.error(.crypto, "could not create a signing context")
        }
        defer { EVP_PKEY_CTX_free(context) }
        guard EVP_PKEY_sign_init(context) == 1, algorithm.configure(context) else {
            throw OpenSSLErrorQueue.error(.crypto, "could not set up \(algorithm.id) signing with key \(key.keyID.short)")
        }
        var length = key.key.signatureSize
        var out = [UInt8](repeating: 0, count: length)
        guard EVP_PKEY_sign(context, &out, &length, digest.bytes, digest.bytes.count) == 1 else {
            throw OpenSSLErrorQueue.error(.crypto, "\(algorithm.id) signing with key \(key.keyID.short) failed")
        }
        return Array(out.prefix(length))
    }

    /// Signs bytes in memory.
    public func sign(_ bytes: [UInt8]) throws -> Signature {
        try sign(digest: Digest.compute(bytes, algorithm: algorithm.digest))
    }

    /// Signs a regular file, streaming it.
    public func sign(fileAt path: String) throws -> Signature {
        try sign(digest: Digest.compute(fileAt: path, algorithm: algorithm.digest))
    }

    /// Signs several files in parallel across cores. All or nothing: the first failure (in
    /// input order) is thrown and no signature is returned.
    /// `progress` is told how many files and bytes have been hashed and signed.
    public func sign(filesAt paths: [String], progress handler: ProgressHandler? = nil) throws -> [Signature] {
        guard let handler else {
            let results = parallelMap(paths) { path in Result { try sign(fileAt: path) } }
            return try results.map { try $0.get() }
        }
        // The total from the sizes the paths have now (a file that cannot be stat'ed counts 0
        // and fails when it is opened).
        let total = paths.reduce(UInt64(0)) { sum, path in
            var info = stat()
            return sum &+ (stat(path, &info) == 0 ? UInt64(max(0, info.st_size)) : 0)
        }
        let progress = ProgressCounter(handler, items: paths.count, bytes: total)
        let results = parallelMap(paths) { path in
            Result { () throws -> Signature in
                let hasher = try Digest.Hasher(algorithm.digest)
                try InputFile.open(path, what: "file").forEachChunk {
                    hasher.update($0)
                    progress.add(bytes: $0.count)
                }
                let signature = try sign(digest: try hasher.finalize())
                progress.add(items: 1)
                return signature
            }
        }
        let signatures = try results.map { try $0.get() }
        progress.finish()
        return signatures
    }
}

/// Maps `items` on all cores, keeping order. For blocking work (file I/O plus hashing), so it
/// runs on threads of its own (the caller's and one per further core), never on Swift
/// concurrency's shared pool or Dispatch's: an async caller blocks nobody else's tasks.
package func parallelMap<T: Sendable, R: Sendable>(_ items: [T], _ transform: @escaping @Sendable (T) -> R) -> [R] {
    parallelMap(items, worker: { () }, { _, item in transform(item) })
}

/// ``parallelMap(_:_:)`` where each worker thread first makes its own `W` (buffers, hashing
/// contexts) with `worker` and hands it to every `transform` it runs: no allocation per item.
/// `threads`: how many (default: one per core); more where each item mostly waits for the disk.
package func parallelMap<T: Sendable, W, R: Sendable>(
    _ items: [T], threads: Int? = nil, worker: @escaping @Sendable () -> W, _ transform: @escaping @Sendable (W, T) -> R
) -> [R] {
    if items.count <= 1 {
        let state = worker()
        return items.map { transform(state, $0) }
    }
    let slots = ResultSlots<R>(count: items.count)
    let next = Counter()
    OwnThreads.run(count: min(threads ?? System.activeProcessorCount, items.count)) {
        let state = worker()
        while true {
            let index = next.take()
            guard index < items.count else { return }
            slots.store(transform(state, items[index]), at: index)
        }
    }
    return slots.collect()
}

/// Hands out 0, 1, 2... to concurrent workers.
private final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    func take() -> Int { value.wrappingAdd(1, ordering: .relaxed).oldValue }
}

/// Fixed slots that concurrent workers fill, each its own index, then read once all are done.
private final class ResultSlots<R>: @unchecked Sendable {
    private let buffer: UnsafeMutableBufferPointer<R?>

    init(count: Int) {
        buffer = .allocate(capacity: count)
        buffer.initialize(repeating: nil)
    }

    deinit {
        buffer.deinitialize()
        buffer.deallocate()
    }

    /// Each index is written by exactly one worker.
    func store(_ value: R, at index: Int) { buffer[index] = value }

    /// Called after every worker has finished.
    func collect() -> [R] { buffer.map { $0! } }
}

// MARK: Swift-native forms: FilePath and URL paths, DataProtocol bytes

extension Signer {
    /// Signs bytes in memory (`Data`, a slice, ...).
    public func sign(_ data: some DataProtocol) throws -> Signature {
        try sign([UInt8](data))
    }

    /// Signs a file, streaming it.
    public func sign(fileAt path: FilePath) throws -> Signature {
        try sign(fileAt: path.string)
    }
}
