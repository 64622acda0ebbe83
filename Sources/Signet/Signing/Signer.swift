import Dispatch
internal import COpenSSL

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
        let bytes = Array(out.prefix(length))
        // Every signature is checked with the public half before anyone sees it: a faulty key,
        // machine or fault attack must not put out signatures that verify with nothing (or
        // leak the key, as a faulty RSA-CRT signature can). About 1/15 of the signing cost.
        guard Verifier.check(bytes, digest: digest, key: key.publicKey, algorithm: algorithm) else {
            throw SignetError(.crypto, "the \(algorithm.id) signature just made with key \(key.keyID.short) does not verify with the key's public half: the key or this machine is faulty; nothing was written")
        }
        return Signature(bytes: bytes, algorithm: algorithm, keyID: key.keyID, digest: digest)
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
    public func sign(filesAt paths: [String]) throws -> [Signature] {
        let results = parallelMap(paths) { path in Result { try sign(fileAt: path) } }
        return try results.map { try $0.get() }
    }
}

/// Maps `items` on all cores, keeping order. For blocking work (file I/O plus hashing).
func parallelMap<T: Sendable, R: Sendable>(_ items: [T], _ transform: @Sendable (T) -> R) -> [R] {
    if items.count <= 1 { return items.map(transform) }
    let slots = ResultSlots<R>(count: items.count)
    DispatchQueue.concurrentPerform(iterations: items.count) { index in
        slots.store(transform(items[index]), at: index)
    }
    return slots.collect()
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
